/* pem.h - checking TLS files before gRPC gets them: gRPC takes any text and
 * fails only at the first handshake, which reads as "no endpoint
 * reachable" after the dial timeout. Pure; any thread. */
#ifndef LR_ETCD_PEM_H
#define LR_ETCD_PEM_H

#include "base/error.h"

/* LR_EINVAL naming `what` and path unless text holds a PEM certificate. */
int lr__pem_check_certs(const char *text, const char *what, const char *path, lr_err *err);
/* LR_EINVAL naming key_path unless key holds a PEM private key that
 * belongs to the first certificate in cert. */
int lr__pem_check_pair(const char *cert, const char *key, const char *key_path, lr_err *err);

#endif
