/* pem.c - checking TLS files before gRPC gets them (see pem.h), with
 * OpenSSL's PEM readers. Pure; any thread. */
#include "etcd/pem.h"

#include <stdbool.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

static X509 *first_cert(const char *text)
{
	BIO *b = BIO_new_mem_buf(text, (int)strlen(text));
	/* _AUX, as gRPC reads them: "TRUSTED CERTIFICATE" blocks too. */
	X509 *x = b != NULL ? PEM_read_bio_X509_AUX(b, NULL, NULL, NULL) : NULL;
	BIO_free(b);
	return x;
}

int lr__pem_check_certs(const char *text, const char *what, const char *path, lr_err *err)
{
	X509 *x = first_cert(text);
	ERR_clear_error();
	if (x == NULL)
		return lr_err_set(err, LR_EINVAL, "%s %s: no PEM certificate in it", what, path);
	X509_free(x);
	return 0;
}

int lr__pem_check_pair(const char *cert, const char *key, const char *key_path, lr_err *err)
{
	if (strncmp(key, "engine:", 7) == 0)
		return 0; /* a key in an OpenSSL engine (an HSM): gRPC loads it */
	BIO *b = BIO_new_mem_buf(key, (int)strlen(key));
	/* No passphrase callback: an encrypted key is refused, not prompted. */
	EVP_PKEY *k = b != NULL ? PEM_read_bio_PrivateKey(b, NULL, NULL, (void *)"") : NULL;
	BIO_free(b);
	X509 *x = first_cert(cert);
	bool matches = k != NULL && x != NULL && X509_check_private_key(x, k) == 1;
	ERR_clear_error();
	EVP_PKEY_free(k);
	X509_free(x);
	if (k == NULL)
		return lr_err_set(err, LR_EINVAL, "lr_client_opts.key %s: no unencrypted PEM "
		                  "private key in it", key_path);
	if (!matches)
		return lr_err_set(err, LR_EINVAL, "lr_client_opts.key %s: not the key of the "
		                  "certificate in lr_client_opts.cert", key_path);
	return 0;
}
