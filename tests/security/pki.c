/* pki.c - throw-away certificates for the TLS tests, made with `openssl`.
 * EC keys (P-256) keep it fast: the whole set takes a fraction of a second. */
#include "pki.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run by /bin/sh with the directory as $1. Certificates live two days: long
 * enough for any test run, short enough to be worthless if they leak. */
static const char script[] =
    "set -e\n"
    "cd \"$1\"\n"
    "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out \"$1.key\"; }\n"
    "ca() { key $1; openssl req -x509 -new -key $1.key -out $1.pem -days 2 -subj \"/CN=$2\"; }\n"
    "leaf() {\n"
    "  key $1\n"
    "  openssl req -new -key $1.key -out $1.csr -subj \"/CN=$2\"\n"
    "  printf 'subjectAltName=%s\\nextendedKeyUsage=serverAuth,clientAuth\\n' \"$3\" >$1.ext\n"
    "  openssl x509 -req -in $1.csr -CA $4.pem -CAkey $4.key -CAcreateserial"
    " -out $1.pem -days 2 -extfile $1.ext\n"
    "}\n"
    "ca ca leaserun-test-ca\n"
    "ca other_ca unrelated-test-ca\n"
    "leaf server etcd-server IP:127.0.0.1,DNS:localhost ca\n"
    "leaf named etcd-named DNS:etcd.test ca\n"
    "leaf local etcd-local DNS:localhost ca\n"
    "leaf client leaserun-client DNS:leaserun-client ca\n"
    "leaf rogue leaserun-rogue DNS:leaserun-rogue other_ca\n";

static void path(char *out, const char *dir, const char *name, const char *ext)
{
	snprintf(out, PATH_MAX, "%s/%s.%s", dir, name, ext);
}

int pki_make(pki *p)
{
	const char *tmp = getenv("TMPDIR");
	memset(p, 0, sizeof(*p));
	snprintf(p->dir, sizeof(p->dir), "%s/leaserun-pki-XXXXXX",
	         tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (mkdtemp(p->dir) == NULL) {
		fprintf(stderr, "pki: mkdtemp %s: %s\n", p->dir, strerror(errno));
		p->dir[0] = '\0';
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		/* openssl's chatter ("Certificate request self-signature ok")
		 * is noise in a test log; a failure is reported below. */
		if (freopen("/dev/null", "w", stdout) == NULL ||
		    freopen("/dev/null", "w", stderr) == NULL)
			_exit(127);
		execl("/bin/sh", "sh", "-c", script, "sh", p->dir, (char *)NULL);
		_exit(127);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0) {
		fprintf(stderr, "pki: making certificates with openssl failed "
		                "(is openssl installed? Debian package openssl)\n");
		pki_remove(p);
		return -1;
	}
	path(p->ca, p->dir, "ca", "pem");
	path(p->other_ca, p->dir, "other_ca", "pem");
	path(p->server, p->dir, "server", "pem");
	path(p->server_key, p->dir, "server", "key");
	path(p->named, p->dir, "named", "pem");
	path(p->named_key, p->dir, "named", "key");
	path(p->local, p->dir, "local", "pem");
	path(p->local_key, p->dir, "local", "key");
	path(p->client, p->dir, "client", "pem");
	path(p->client_key, p->dir, "client", "key");
	path(p->rogue, p->dir, "rogue", "pem");
	path(p->rogue_key, p->dir, "rogue", "key");
	return 0;
}

static int remove_entry(const char *fpath, const struct stat *sb, int type,
                        struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	remove(fpath);
	return 0;
}

void pki_remove(pki *p)
{
	if (p->dir[0] != '\0')
		nftw(p->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
	p->dir[0] = '\0';
}
