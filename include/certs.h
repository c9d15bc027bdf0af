/*
 * certs: the `gpu-extender certs` command. Makes and renews, as Secrets in
 * the product's namespace, the certificates the install needs (docs/install.md,
 * docs/webhook-certificates.md):
 *
 *   gpu-extender-ca                the CA (tls.crt, tls.key) and the bundle it
 *                                  publishes (ca.crt: this CA, then the one
 *                                  before it while that is still valid)
 *   gpu-extender-webhook-tls       the Service's serving certificate (webhook
 *                                  and verb port), ca.crt
 *   gpu-extender-client-ca         ca.crt: the CAs of kube-scheduler's client certificate
 *   gpu-scheduler-extender-client  kube-scheduler's client certificate, ca.crt
 *
 * and puts the bundle into every webhook's caBundle of the
 * MutatingWebhookConfiguration. What is valid is kept: a second run writes
 * nothing. A certificate is made again when it is missing, does not load,
 * is not of the CA, lacks a name, or expires within the renewal window.
 */
#ifndef GPU_CERTS_H
#define GPU_CERTS_H

#include "buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* argv[0] is "certs". Returns the process exit status (0, 1 failure, 2 usage). */
int certs_main(int argc, char **argv);

/* A CA in memory (opaque GnuTLS objects behind it). */
struct certs_ca;

/* A new self-signed ECDSA P-256 CA valid for days from now. NULL with err. */
struct certs_ca *certs_ca_new(const char *cn, long days, time_t now, char *err, size_t errlen);
/* The CA of a PEM certificate and key. NULL with err when they do not load or do not match. */
struct certs_ca *certs_ca_load(const char *cert_pem, const char *key_pem, char *err, size_t errlen);
void certs_ca_free(struct certs_ca *ca);
/* Its certificate and key as PEM, appended to the buffers. 0 or -1. */
int certs_ca_pem(const struct certs_ca *ca, struct buf *cert, struct buf *key);
/* When it expires. */
time_t certs_ca_expiry(const struct certs_ca *ca);

enum certs_usage { CERTS_SERVER, CERTS_CLIENT };

/*
 * A new key and certificate signed by ca, valid for days (never past the
 * CA), with Common Name cn and, for a server, the DNS names dns[0..n).
 * PEM appended to cert and key. 0, or -1 with err.
 */
int certs_issue(const struct certs_ca *ca, enum certs_usage usage, const char *cn, const char *const *dns,
		size_t n, long days, time_t now, struct buf *cert, struct buf *key, char *err, size_t errlen);

/*
 * Whether a certificate and key may be kept at time now: they load and
 * match, the certificate is signed by ca, is valid now and past now +
 * renew_s, and (a server) names every DNS name. true, or false with why.
 */
bool certs_keep(const struct certs_ca *ca, const char *cert_pem, const char *key_pem, const char *const *dns,
		size_t n, time_t now, long renew_s, char *why, size_t whylen);

#endif
