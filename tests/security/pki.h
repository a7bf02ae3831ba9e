/* pki.h - throw-away certificates for the TLS tests, made with `openssl` in a
 * private temporary directory: a CA, a second CA that has nothing to do with
 * the first, server certificates and client certificates. */
#ifndef LR_TEST_PKI_H
#define LR_TEST_PKI_H

#include <limits.h>

typedef struct pki {
	char dir[512];
	/* PEM files, each "<dir>/<name>.pem" with its key "<dir>/<name>.key". */
	char ca[PATH_MAX];          /* the cluster's CA */
	char other_ca[PATH_MAX];    /* an unrelated CA, self-signed */
	char server[PATH_MAX], server_key[PATH_MAX];   /* IP:127.0.0.1, DNS:localhost */
	char named[PATH_MAX], named_key[PATH_MAX];     /* DNS:etcd.test only */
	char local[PATH_MAX], local_key[PATH_MAX];     /* DNS:localhost only */
	char client[PATH_MAX], client_key[PATH_MAX];   /* signed by ca */
	char rogue[PATH_MAX], rogue_key[PATH_MAX];     /* signed by other_ca */
} pki;

/* Make every certificate under a new directory in $TMPDIR (or /tmp).
 * 0 on success; -1 with the reason on stderr (openssl missing: Debian
 * package openssl). */
int pki_make(pki *p);

/* Remove the directory and everything in it. */
void pki_remove(pki *p);

#endif
