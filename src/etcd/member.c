/* member.c - see member.h. Any thread. */
#include "etcd/member.h"

#include <stdio.h>
#include <stdlib.h>

#include "rpc.pb-c.h"

#include "base/error.h"

int lr_etcd_member_version(lr_etcd *c, char *buf, size_t size, lr_err *err)
{
	Etcdserverpb__StatusRequest req = ETCDSERVERPB__STATUS_REQUEST__INIT;
	ProtobufCMessage *resp = NULL;
	int rc = lr_etcd_unary(c, "/etcdserverpb.Maintenance/Status", &req.base,
	                       &etcdserverpb__status_response__descriptor, &resp, LR_CALL_RETRY,
	                       err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "member status");
	const Etcdserverpb__StatusResponse *st = (const Etcdserverpb__StatusResponse *)resp;
	snprintf(buf, size, "%s", st->version != NULL ? st->version : "");
	lr_etcd_reply_free(resp);
	return 0;
}

/* "major.minor.patch" (anything may follow the patch: "-rc.1"); false
 * otherwise. */
static bool parse_version(const char *v, long part[3])
{
	for (int i = 0; i < 3; i++) {
		if (*v < '0' || *v > '9')
			return false;
		char *end;
		part[i] = strtol(v, &end, 10);
		if (i == 2)
			break;
		if (*end != '.')
			return false;
		v = end + 1;
	}
	return true;
}

bool lr_etcd_version_revokes_live_leases(const char *version)
{
	long p[3];
	if (version == NULL || !parse_version(version, p) || p[0] != 3)
		return false;
	return (p[1] == 4 && p[2] < 31) || (p[1] == 5 && p[2] < 13) || p[1] < 4;
}
