/* opts.h - how an etcd client connects: endpoints, timeouts, TLS files and
 * etcd auth, as the caller gives them. Plain data; read by any layer. */
#ifndef LR_ETCD_OPTS_H
#define LR_ETCD_OPTS_H

typedef struct lr_etcd_opts {
	const char *endpoints;       /* "host:port[,host:port...]"; required */
	double dial_timeout_s;       /* 0 means 5 */
	double call_timeout_s;       /* 0 means 5: deadline of one unary call */
	const char *cacert;          /* PEM file: TLS when set */
	const char *cert, *key;      /* PEM files: client certificate (mTLS) */
	const char *tls_server_name; /* name checked against the certificate */
	const char *user;            /* etcd auth; NULL for none */
	const char *password;
} lr_etcd_opts;

#endif
