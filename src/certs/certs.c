/* The `gpu-extender certs` command: the install's certificates as Secrets (include/certs.h). */
#include "base64.h"
#include "certs.h"
#include "kube.h"
#include "log.h"
#include "strnum.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdint.h>
#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PEM_CAP (1 << 16)
#define DAY_S 86400L
/* Clocks of the nodes disagree a little: certificates start an hour back. */
#define BACKDATE_S 3600
/* The signature only: the times are checked against the run's clock (now), not the library's. */
#define VERIFY_FLAGS (GNUTLS_VERIFY_DISABLE_TIME_CHECKS | GNUTLS_VERIFY_DISABLE_TRUSTED_TIME_CHECKS)

struct certs_ca {
	gnutls_x509_crt_t crt;
	gnutls_x509_privkey_t key;
	gnutls_privkey_t signer;
};

/* ---- the PKI, without the API server ------------------------------------- */

static void gnutls_err(char *err, size_t errlen, const char *what, int rc)
{
	snprintf(err, errlen, "%s: %s", what, gnutls_strerror(rc));
}

static int export_pem(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, struct buf *cert, struct buf *kout)
{
	gnutls_datum_t d = { NULL, 0 };
	int rc = 0;
	if (cert) {
		if (gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d) < 0)
			return -1;
		rc = buf_add(cert, d.data, d.size);
		gnutls_free(d.data);
	}
	if (!rc && kout) {
		d.data = NULL;
		if (gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN, &d) < 0)
			return -1;
		rc = buf_add(kout, d.data, d.size);
		gnutls_free(d.data);
	}
	return rc ? -1 : 0;
}

static int new_key(gnutls_x509_privkey_t *key)
{
	if (gnutls_x509_privkey_init(key) < 0)
		return -1;
	if (gnutls_x509_privkey_generate(*key, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0) <
	    0) {
		gnutls_x509_privkey_deinit(*key);
		return -1;
	}
	return 0;
}

/* The fields every certificate here has: version 3, random serial, times, CN, key, key id. */
static int fill_common(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, const char *cn, time_t now,
		       time_t until, char *err, size_t errlen)
{
	unsigned char serial[16];
	int rc = gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof(serial));
	serial[0] &= 0x7f; /* positive */
	serial[0] |= 0x01; /* and never a leading zero byte */
	char dn[300];
	snprintf(dn, sizeof(dn), "CN=%s", cn);
	const char *bad = NULL;
	unsigned char kid[64];
	size_t kidlen = sizeof(kid);
	if (rc >= 0)
		rc = gnutls_x509_crt_set_version(crt, 3);
	if (rc >= 0)
		rc = gnutls_x509_crt_set_serial(crt, serial, sizeof(serial));
	if (rc >= 0)
		rc = gnutls_x509_crt_set_activation_time(crt, now - BACKDATE_S);
	if (rc >= 0)
		rc = gnutls_x509_crt_set_expiration_time(crt, until);
	if (rc >= 0)
		rc = gnutls_x509_crt_set_dn(crt, dn, &bad);
	if (rc >= 0)
		rc = gnutls_x509_crt_set_key(crt, key);
	if (rc >= 0)
		rc = gnutls_x509_crt_get_key_id(crt, GNUTLS_KEYID_USE_SHA1, kid, &kidlen);
	if (rc >= 0)
		rc = gnutls_x509_crt_set_subject_key_id(crt, kid, kidlen);
	if (rc < 0) {
		gnutls_err(err, errlen, "cannot fill the certificate", rc);
		return -1;
	}
	return 0;
}

/*
 * A certificate made in memory, read back from its DER: GnuTLS compares the
 * issuer of a certificate it verifies with the encoded subject of the CA,
 * which a certificate just made does not have yet.
 */
static int reload(gnutls_x509_crt_t *crt)
{
	gnutls_datum_t der = { NULL, 0 };
	gnutls_x509_crt_t fresh;
	int rc = gnutls_x509_crt_export2(*crt, GNUTLS_X509_FMT_DER, &der);
	if (rc >= 0 && (rc = gnutls_x509_crt_init(&fresh)) >= 0) {
		if ((rc = gnutls_x509_crt_import(fresh, &der, GNUTLS_X509_FMT_DER)) >= 0) {
			gnutls_x509_crt_deinit(*crt);
			*crt = fresh;
		} else {
			gnutls_x509_crt_deinit(fresh);
		}
	}
	gnutls_free(der.data);
	return rc;
}

struct certs_ca *certs_ca_new(const char *cn, long days, time_t now, char *err, size_t errlen)
{
	struct certs_ca *ca = calloc(1, sizeof(*ca));
	if (!ca || new_key(&ca->key)) {
		snprintf(err, errlen, "cannot make the CA's key");
		free(ca);
		return NULL;
	}
	int rc = gnutls_x509_crt_init(&ca->crt);
	if (rc >= 0 && !fill_common(ca->crt, ca->key, cn, now, now + days * DAY_S, err, errlen)) {
		rc = gnutls_x509_crt_set_basic_constraints(ca->crt, 1, 0);
		if (rc >= 0)
			rc = gnutls_x509_crt_set_key_usage(ca->crt, GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN |
									   GNUTLS_KEY_DIGITAL_SIGNATURE);
		if (rc >= 0)
			rc = gnutls_x509_crt_sign2(ca->crt, ca->crt, ca->key, GNUTLS_DIG_SHA256, 0);
		if (rc >= 0)
			rc = reload(&ca->crt);
		if (rc >= 0)
			rc = gnutls_privkey_init(&ca->signer);
		if (rc >= 0)
			rc = gnutls_privkey_import_x509(ca->signer, ca->key, 0);
		if (rc >= 0)
			return ca;
		gnutls_err(err, errlen, "cannot sign the CA", rc);
	} else if (rc < 0) {
		gnutls_err(err, errlen, "cannot make the CA", rc);
	}
	certs_ca_free(ca);
	return NULL;
}

static bool key_matches(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key)
{
	unsigned char a[64], b[64];
	size_t alen = sizeof(a), blen = sizeof(b);
	return gnutls_x509_crt_get_key_id(crt, GNUTLS_KEYID_USE_SHA256, a, &alen) >= 0 &&
	       gnutls_x509_privkey_get_key_id(key, GNUTLS_KEYID_USE_SHA256, b, &blen) >= 0 && alen == blen &&
	       !memcmp(a, b, alen);
}

/* cert and key from PEM; 0, or -1 with why (the objects are then freed). */
static int load_pair(const char *cert_pem, const char *key_pem, gnutls_x509_crt_t *crt, gnutls_x509_privkey_t *key,
		     char *why, size_t whylen)
{
	gnutls_datum_t c = { (unsigned char *)cert_pem, (unsigned)strlen(cert_pem) };
	gnutls_datum_t k = { (unsigned char *)key_pem, (unsigned)strlen(key_pem) };
	*crt = NULL;
	*key = NULL;
	int rc = gnutls_x509_crt_init(crt);
	if (rc >= 0 && (rc = gnutls_x509_crt_import(*crt, &c, GNUTLS_X509_FMT_PEM)) < 0)
		gnutls_err(why, whylen, "the certificate does not load", rc);
	else if (rc >= 0 && (rc = gnutls_x509_privkey_init(key)) >= 0 &&
		 (rc = gnutls_x509_privkey_import2(*key, &k, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN)) < 0)
		gnutls_err(why, whylen, "the key does not load", rc);
	else if (rc >= 0 && !key_matches(*crt, *key)) {
		snprintf(why, whylen, "the key is not the certificate's");
		rc = -1;
	}
	if (rc >= 0)
		return 0;
	if (*crt)
		gnutls_x509_crt_deinit(*crt);
	if (*key)
		gnutls_x509_privkey_deinit(*key);
	*crt = NULL;
	*key = NULL;
	return -1;
}

struct certs_ca *certs_ca_load(const char *cert_pem, const char *key_pem, char *err, size_t errlen)
{
	struct certs_ca *ca = calloc(1, sizeof(*ca));
	if (!ca) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (load_pair(cert_pem, key_pem, &ca->crt, &ca->key, err, errlen)) {
		free(ca);
		return NULL;
	}
	unsigned ca_flag = 0;
	if (gnutls_x509_crt_get_basic_constraints(ca->crt, NULL, &ca_flag, NULL) < 0 || !ca_flag) {
		snprintf(err, errlen, "the certificate is not a CA's");
		certs_ca_free(ca);
		return NULL;
	}
	int rc = gnutls_privkey_init(&ca->signer);
	if (rc >= 0)
		rc = gnutls_privkey_import_x509(ca->signer, ca->key, 0);
	if (rc < 0) {
		gnutls_err(err, errlen, "the CA's key", rc);
		certs_ca_free(ca);
		return NULL;
	}
	return ca;
}

void certs_ca_free(struct certs_ca *ca)
{
	if (!ca)
		return;
	if (ca->signer)
		gnutls_privkey_deinit(ca->signer);
	if (ca->crt)
		gnutls_x509_crt_deinit(ca->crt);
	if (ca->key)
		gnutls_x509_privkey_deinit(ca->key);
	free(ca);
}

int certs_ca_pem(const struct certs_ca *ca, struct buf *cert, struct buf *key)
{
	return export_pem(ca->crt, ca->key, cert, key);
}

time_t certs_ca_expiry(const struct certs_ca *ca)
{
	return gnutls_x509_crt_get_expiration_time(ca->crt);
}

static int set_usage(gnutls_x509_crt_t crt, enum certs_usage usage, const char *const *dns, size_t n)
{
	int rc = gnutls_x509_crt_set_basic_constraints(crt, 0, -1);
	if (rc >= 0)
		rc = gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE | GNUTLS_KEY_KEY_ENCIPHERMENT);
	if (rc >= 0)
		rc = gnutls_x509_crt_set_key_purpose_oid(
			crt, usage == CERTS_SERVER ? GNUTLS_KP_TLS_WWW_SERVER : GNUTLS_KP_TLS_WWW_CLIENT, 0);
	for (size_t i = 0; rc >= 0 && usage == CERTS_SERVER && i < n; i++)
		rc = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, dns[i], (unsigned)strlen(dns[i]),
							  GNUTLS_FSAN_APPEND);
	return rc;
}

int certs_issue(const struct certs_ca *ca, enum certs_usage usage, const char *cn, const char *const *dns,
		size_t n, long days, time_t now, struct buf *cert, struct buf *key, char *err, size_t errlen)
{
	gnutls_x509_privkey_t k;
	gnutls_x509_crt_t crt;
	if (new_key(&k)) {
		snprintf(err, errlen, "cannot make a key");
		return -1;
	}
	if (gnutls_x509_crt_init(&crt) < 0) {
		gnutls_x509_privkey_deinit(k);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	time_t until = now + days * DAY_S, ca_until = certs_ca_expiry(ca);
	if (until > ca_until)
		until = ca_until;
	int rc = -1;
	unsigned char akid[64];
	size_t akidlen = sizeof(akid);
	if (!fill_common(crt, k, cn, now, until, err, errlen)) {
		rc = set_usage(crt, usage, dns, n);
		if (rc >= 0 && gnutls_x509_crt_get_subject_key_id(ca->crt, akid, &akidlen, NULL) >= 0)
			rc = gnutls_x509_crt_set_authority_key_id(crt, akid, akidlen);
		if (rc >= 0)
			rc = gnutls_x509_crt_privkey_sign(crt, ca->crt, ca->signer, GNUTLS_DIG_SHA256, 0);
		if (rc < 0)
			gnutls_err(err, errlen, "cannot sign the certificate", rc);
		else if (export_pem(crt, k, cert, key)) {
			snprintf(err, errlen, "cannot write the certificate as PEM");
			rc = -1;
		}
	}
	gnutls_x509_crt_deinit(crt);
	gnutls_x509_privkey_deinit(k);
	return rc < 0 ? -1 : 0;
}

bool certs_keep(const struct certs_ca *ca, const char *cert_pem, const char *key_pem, const char *const *dns,
		size_t n, time_t now, long renew_s, char *why, size_t whylen)
{
	gnutls_x509_crt_t crt;
	gnutls_x509_privkey_t key;
	if (load_pair(cert_pem, key_pem, &crt, &key, why, whylen))
		return false;
	bool keep = false;
	unsigned status = 0;
	time_t end = gnutls_x509_crt_get_expiration_time(crt);
	if (gnutls_x509_crt_verify(crt, &((struct certs_ca *)ca)->crt, 1, VERIFY_FLAGS, &status) < 0 || status)
		snprintf(why, whylen, "not signed by the current CA");
	else if (gnutls_x509_crt_get_activation_time(crt) > now)
		snprintf(why, whylen, "not valid yet");
	else if (end <= now + renew_s)
		snprintf(why, whylen, "expires within the renewal window (in %ld days)", (long)(end - now) / DAY_S);
	else {
		keep = true;
		for (size_t i = 0; i < n; i++)
			if (!gnutls_x509_crt_check_hostname(crt, dns[i])) {
				snprintf(why, whylen, "does not name %s", dns[i]);
				keep = false;
				break;
			}
	}
	gnutls_x509_crt_deinit(crt);
	gnutls_x509_privkey_deinit(key);
	return keep;
}

/* ---- the Secrets ------------------------------------------------------------ */

struct certs_opts {
	const char *kubeconfig, *context, *ns, *service, *webhook, *client_cn;
	long days, ca_days, renew_days;
	int wait_s;
	bool log_json;
};

struct run {
	struct certs_opts o;
	struct kube_client *kc;
	time_t now;
	int written;
};

/* One Secret as read: its object (NULL when absent) and its data, decoded. */
struct secret {
	cJSON *obj;
	struct buf crt, key, ca;
};

static void secret_release(struct secret *s)
{
	cJSON_Delete(s->obj);
	buf_release(&s->crt);
	buf_release(&s->key);
	buf_release(&s->ca);
}

static void data_field(const cJSON *data, const char *k, struct buf *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(data, k);
	buf_clear(out);
	if (cJSON_IsString(v) && base64_decode(v->valuestring, out))
		buf_clear(out);
	buf_cstr(out);
}

/* 0 read (s->obj NULL when there is none), -1 with err. */
static int secret_read(struct run *r, const char *name, struct secret *s, char *err, size_t errlen)
{
	char path[512];
	struct kube_response resp;
	memset(s, 0, sizeof(*s));
	buf_init(&s->crt, PEM_CAP);
	buf_init(&s->key, PEM_CAP);
	buf_init(&s->ca, PEM_CAP);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s", r->o.ns, name);
	kube_response_init(&resp);
	int rc = kube_request(r->kc, "GET", path, NULL, NULL, 10, &resp, err, errlen);
	if (!rc && resp.status == 200) {
		if (!(s->obj = cJSON_ParseWithLength(resp.body.data, resp.body.len))) {
			snprintf(err, errlen, "Secret %s/%s: the answer is not JSON", r->o.ns, name);
			rc = -1;
		}
	} else if (!rc && resp.status != 404) {
		char msg[256];
		snprintf(err, errlen, "reading Secret %s/%s: HTTP %ld: %s", r->o.ns, name, resp.status,
			 kube_status_message(&resp, msg, sizeof(msg)));
		rc = -1;
	}
	kube_response_release(&resp);
	if (s->obj) {
		const cJSON *data = cJSON_GetObjectItemCaseSensitive(s->obj, "data");
		data_field(data, "tls.crt", &s->crt);
		data_field(data, "tls.key", &s->key);
		data_field(data, "ca.crt", &s->ca);
	}
	return rc;
}

static int add_b64(cJSON *data, const char *k, const struct buf *v)
{
	struct buf b;
	buf_init(&b, 4 * PEM_CAP);
	int rc = base64_encode(v->data ? v->data : "", v->len, &b) || !cJSON_AddStringToObject(data, k, buf_cstr(&b));
	buf_release(&b);
	return rc ? -1 : 0;
}

/*
 * Writes Secret name with the fields given (NULL: left out): PUT over the
 * one read (its resourceVersion and type kept, so a concurrent writer gets
 * 409), or POST when there was none.
 */
static int secret_write(struct run *r, const char *name, const struct secret *old, const char *type,
			const struct buf *crt, const struct buf *key, const struct buf *ca, char *err, size_t errlen)
{
	cJSON *o = cJSON_CreateObject(), *md = cJSON_AddObjectToObject(o, "metadata");
	cJSON *labels = cJSON_AddObjectToObject(md, "labels"), *data = cJSON_AddObjectToObject(o, "data");
	cJSON_AddStringToObject(o, "apiVersion", "v1");
	cJSON_AddStringToObject(o, "kind", "Secret");
	cJSON_AddStringToObject(md, "name", name);
	cJSON_AddStringToObject(md, "namespace", r->o.ns);
	cJSON_AddStringToObject(labels, "app.kubernetes.io/part-of", "gpu-extender");
	cJSON_AddStringToObject(labels, "app.kubernetes.io/managed-by", "gpu-extender-certs");
	const cJSON *omd = old->obj ? cJSON_GetObjectItemCaseSensitive(old->obj, "metadata") : NULL;
	const cJSON *rv = cJSON_GetObjectItemCaseSensitive(omd, "resourceVersion");
	const cJSON *otype = old->obj ? cJSON_GetObjectItemCaseSensitive(old->obj, "type") : NULL;
	if (cJSON_IsString(rv))
		cJSON_AddStringToObject(md, "resourceVersion", rv->valuestring);
	cJSON_AddStringToObject(o, "type", cJSON_IsString(otype) ? otype->valuestring : type);
	int rc = (crt && add_b64(data, "tls.crt", crt)) || (key && add_b64(data, "tls.key", key)) ||
		 (ca && add_b64(data, "ca.crt", ca));
	char *body = rc ? NULL : cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!body) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	char path[512];
	if (old->obj)
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s", r->o.ns, name);
	else
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets", r->o.ns);
	struct kube_response resp;
	kube_response_init(&resp);
	rc = kube_request(r->kc, old->obj ? "PUT" : "POST", path, body, NULL, 10, &resp, err, errlen);
	free(body);
	if (!rc && resp.status != 200 && resp.status != 201) {
		char msg[256];
		snprintf(err, errlen, "writing Secret %s/%s: HTTP %ld: %s", r->o.ns, name, resp.status,
			 kube_status_message(&resp, msg, sizeof(msg)));
		rc = -1;
	}
	kube_response_release(&resp);
	if (!rc)
		r->written++;
	return rc;
}

/* The CA: kept while it outlives a leaf issued now; else a new one, the old still in the bundle. */
static struct certs_ca *ensure_ca(struct run *r, struct buf *bundle, char *err, size_t errlen)
{
	const char *name = "gpu-extender-ca";
	struct secret s;
	if (secret_read(r, name, &s, err, errlen))
		return NULL;
	char why[256] = "there is none";
	struct certs_ca *old = s.obj ? certs_ca_load(buf_cstr(&s.crt), buf_cstr(&s.key), why, sizeof(why)) : NULL;
	if (old && certs_ca_expiry(old) > r->now + (r->o.days + r->o.renew_days) * DAY_S && s.ca.len) {
		buf_add(bundle, s.ca.data, s.ca.len);
		log_info("certificate kept", "secret=%s/%s", r->o.ns, name);
		secret_release(&s);
		return old;
	}
	if (old)
		snprintf(why, sizeof(why), "it expires before a certificate issued now would");
	struct certs_ca *ca = certs_ca_new("gpu-extender-ca", r->o.ca_days, r->now, err, errlen);
	struct buf crt, key;
	buf_init(&crt, PEM_CAP);
	buf_init(&key, PEM_CAP);
	int rc = !ca || certs_ca_pem(ca, &crt, &key) || buf_add(bundle, crt.data, crt.len);
	/* The CA before it stays trusted while it is valid (its certificates are replaced below). */
	if (!rc && old && certs_ca_expiry(old) > r->now && certs_ca_pem(old, bundle, NULL))
		rc = -1;
	if (!rc)
		rc = secret_write(r, name, &s, "kubernetes.io/tls", &crt, &key, bundle, err, errlen);
	else if (ca)
		snprintf(err, errlen, "cannot write the CA as PEM");
	if (!rc)
		log_info("new CA", "secret=%s/%s reason=\"%s\"", r->o.ns, name, why);
	buf_release(&crt);
	buf_release(&key);
	certs_ca_free(old);
	secret_release(&s);
	if (rc) {
		certs_ca_free(ca);
		return NULL;
	}
	return ca;
}

/* A leaf's Secret: kept when valid and its ca.crt is the bundle; otherwise issued again. */
static int ensure_leaf(struct run *r, const struct certs_ca *ca, const struct buf *bundle, const char *name,
		       enum certs_usage usage, const char *cn, const char *const *dns, size_t n, char *err,
		       size_t errlen)
{
	struct secret s;
	if (secret_read(r, name, &s, err, errlen))
		return -1;
	char why[256] = "there is none";
	bool same_ca = s.ca.len == bundle->len && !memcmp(s.ca.data, bundle->data, bundle->len);
	bool valid = s.obj && certs_keep(ca, buf_cstr(&s.crt), buf_cstr(&s.key), dns, n, r->now,
					 r->o.renew_days * DAY_S, why, sizeof(why));
	if (valid && same_ca) {
		log_info("certificate kept", "secret=%s/%s", r->o.ns, name);
		secret_release(&s);
		return 0;
	}
	struct buf crt, key;
	buf_init(&crt, PEM_CAP);
	buf_init(&key, PEM_CAP);
	int rc;
	if (valid) { /* only ca.crt to bring in step */
		snprintf(why, sizeof(why), "ca.crt is not the CA bundle");
		rc = buf_add(&crt, s.crt.data, s.crt.len) || buf_add(&key, s.key.data, s.key.len) ? -1 : 0;
	} else {
		rc = certs_issue(ca, usage, cn, dns, n, r->o.days, r->now, &crt, &key, err, errlen);
	}
	if (!rc)
		rc = secret_write(r, name, &s, "kubernetes.io/tls", &crt, &key, bundle, err, errlen);
	if (!rc)
		log_info("certificate written", "secret=%s/%s reason=\"%s\"", r->o.ns, name, why);
	buf_release(&crt);
	buf_release(&key);
	secret_release(&s);
	return rc;
}

/* The client CA Secret: ca.crt only. */
static int ensure_client_ca(struct run *r, const struct buf *bundle, char *err, size_t errlen)
{
	const char *name = "gpu-extender-client-ca";
	struct secret s;
	if (secret_read(r, name, &s, err, errlen))
		return -1;
	int rc = 0;
	if (s.obj && s.ca.len == bundle->len && !memcmp(s.ca.data, bundle->data, bundle->len))
		log_info("certificate kept", "secret=%s/%s", r->o.ns, name);
	else if (!(rc = secret_write(r, name, &s, "Opaque", NULL, NULL, bundle, err, errlen)))
		log_info("certificate written", "secret=%s/%s reason=\"the CA bundle changed or there was none\"",
			 r->o.ns, name);
	secret_release(&s);
	return rc;
}

/* ---- the webhook's caBundle ------------------------------------------------------ */

/* 1 patched or already right, 0 not there (yet), -1 error. */
static int patch_ca_bundle(struct run *r, const char *b64, char *err, size_t errlen)
{
	char path[512], msg[256];
	snprintf(path, sizeof(path), "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/%s",
		 r->o.webhook);
	struct kube_response resp;
	kube_response_init(&resp);
	int rc = kube_request(r->kc, "GET", path, NULL, NULL, 10, &resp, err, errlen);
	cJSON *obj = NULL;
	if (!rc && resp.status == 404) {
		kube_response_release(&resp);
		return 0;
	}
	if (!rc && (resp.status != 200 || !(obj = cJSON_ParseWithLength(resp.body.data, resp.body.len)))) {
		snprintf(err, errlen, "reading MutatingWebhookConfiguration %s: HTTP %ld: %s", r->o.webhook,
			 resp.status, kube_status_message(&resp, msg, sizeof(msg)));
		rc = -1;
	}
	kube_response_release(&resp);
	if (rc)
		return -1;
	/* One "add" per webhook whose caBundle differs (add also replaces). */
	struct buf patch;
	buf_init(&patch, 1 << 20);
	buf_addc(&patch, '[');
	int i = 0, ops = 0;
	const cJSON *w;
	cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(obj, "webhooks")) {
		const cJSON *cc = cJSON_GetObjectItemCaseSensitive(w, "clientConfig");
		const cJSON *cur = cJSON_GetObjectItemCaseSensitive(cc, "caBundle");
		if (!cJSON_IsString(cur) || strcmp(cur->valuestring, b64))
			buf_printf(&patch, "%s{\"op\":\"add\",\"path\":\"/webhooks/%d/clientConfig/caBundle\",\"value\":\"%s\"}",
				   ops++ ? "," : "", i, b64);
		i++;
	}
	cJSON_Delete(obj);
	rc = buf_addc(&patch, ']') ? -1 : 0;
	if (!rc && ops) {
		kube_response_init(&resp);
		rc = kube_request(r->kc, "PATCH", path, buf_cstr(&patch), "application/json-patch+json", 10, &resp, err,
				  errlen);
		if (!rc && resp.status != 200) {
			snprintf(err, errlen, "patching the caBundle of %s: HTTP %ld: %s", r->o.webhook, resp.status,
				 kube_status_message(&resp, msg, sizeof(msg)));
			rc = -1;
		}
		kube_response_release(&resp);
		if (!rc) {
			r->written++;
			log_info("caBundle written", "webhookconfiguration=%s webhooks=%d", r->o.webhook, ops);
		}
	} else if (!rc) {
		log_info("caBundle kept", "webhookconfiguration=%s", r->o.webhook);
	}
	buf_release(&patch);
	return rc ? -1 : 1;
}

/* The webhook configuration may come later than this Job's pod (one apply): wait for it. */
static int fill_ca_bundle(struct run *r, const struct buf *bundle, char *err, size_t errlen)
{
	struct buf b64;
	buf_init(&b64, 4 * PEM_CAP);
	int rc = base64_encode(bundle->data, bundle->len, &b64) ? -1 : 0;
	for (int waited = 0; !rc;) {
		rc = patch_ca_bundle(r, buf_cstr(&b64), err, errlen);
		if (rc == 1) {
			rc = 0;
			break;
		}
		if (rc < 0)
			break;
		if (waited >= r->o.wait_s) {
			snprintf(err, errlen, "no MutatingWebhookConfiguration %s after %d s (is it installed?)",
				 r->o.webhook, r->o.wait_s);
			rc = -1;
			break;
		}
		if (!waited)
			log_info("waiting for the webhook configuration", "name=%s", r->o.webhook);
		sleep(2);
		waited += 2;
	}
	buf_release(&b64);
	return rc;
}

/* ---- the command --------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: gpu-extender certs [options]\n"
		"\n"
		"Makes or renews the install's certificates as Secrets (CA, the Service's serving\n"
		"certificate, kube-scheduler's client certificate, the client CA) and fills the\n"
		"webhook configuration's caBundle. Keeps what is valid: a second run writes nothing.\n"
		"\n"
		"  --kubeconfig FILE       API server and credentials (default: the pod's service account)\n"
		"  --context NAME          kubeconfig context (default: current-context)\n"
		"  --namespace NS          where the Secrets and the Service are (default gpu-system)\n"
		"  --service NAME          the extender's Service (default gpu-extender)\n"
		"  --webhook-config NAME   the MutatingWebhookConfiguration (default gpu-env-injector)\n"
		"  --client-name CN        kube-scheduler's client certificate's name (default gpu-scheduler)\n"
		"  --days N                lifetime of the certificates (default 365)\n"
		"  --ca-days N             lifetime of a new CA (default 3650)\n"
		"  --renew-days N          renew what expires within N days (default 30)\n"
		"  --wait SECONDS          how long to wait for the webhook configuration (default 300)\n"
		"  --log-json              log JSON lines\n");
}

static bool long_opt(long *dst, const char *name, const char *v, long lo, long hi)
{
	int64_t x;
	if (!strnum_i64(v, &x) || x < lo || x > hi) {
		fprintf(stderr, "gpu-extender certs: %s wants a whole number from %ld to %ld, not '%s'\n", name, lo, hi,
			v);
		return false;
	}
	*dst = (long)x;
	return true;
}

/* 0 go on, 1 help printed, 2 usage error. */
static int parse(int argc, char **argv, struct certs_opts *o)
{
	enum { O_KC = 256, O_CTX, O_NS, O_SVC, O_WH, O_CN, O_DAYS, O_CADAYS, O_RENEW, O_WAIT, O_JSON };
	static const struct option lo[] = {
		{ "kubeconfig", required_argument, NULL, O_KC }, { "context", required_argument, NULL, O_CTX },
		{ "namespace", required_argument, NULL, O_NS },  { "service", required_argument, NULL, O_SVC },
		{ "webhook-config", required_argument, NULL, O_WH }, { "client-name", required_argument, NULL, O_CN },
		{ "days", required_argument, NULL, O_DAYS },     { "ca-days", required_argument, NULL, O_CADAYS },
		{ "renew-days", required_argument, NULL, O_RENEW }, { "wait", required_argument, NULL, O_WAIT },
		{ "log-json", no_argument, NULL, O_JSON },       { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	*o = (struct certs_opts){ .ns = "gpu-system", .service = "gpu-extender", .webhook = "gpu-env-injector",
				  .client_cn = "gpu-scheduler", .days = 365, .ca_days = 3650, .renew_days = 30,
				  .wait_s = 300 };
	long wait = o->wait_s;
	int c;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		bool ok = true;
		switch (c) {
		case O_KC: o->kubeconfig = optarg; break;
		case O_CTX: o->context = optarg; break;
		case O_NS: o->ns = optarg; break;
		case O_SVC: o->service = optarg; break;
		case O_WH: o->webhook = optarg; break;
		case O_CN: o->client_cn = optarg; break;
		case O_DAYS: ok = long_opt(&o->days, "--days", optarg, 1, 36500); break;
		case O_CADAYS: ok = long_opt(&o->ca_days, "--ca-days", optarg, 1, 36500); break;
		case O_RENEW: ok = long_opt(&o->renew_days, "--renew-days", optarg, 0, 36500); break;
		case O_WAIT: ok = long_opt(&wait, "--wait", optarg, 0, 86400); break;
		case O_JSON: o->log_json = true; break;
		case 'h': usage(stdout); return 1;
		default:
			fprintf(stderr, "gpu-extender certs: unknown or incomplete option '%s'\n", argv[optind - 1]);
			usage(stderr);
			return 2;
		}
		if (!ok)
			return 2;
	}
	o->wait_s = (int)wait;
	if (optind < argc) {
		fprintf(stderr, "gpu-extender certs: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (o->renew_days >= o->days || o->days + o->renew_days > o->ca_days) {
		fprintf(stderr, "gpu-extender certs: --renew-days must be under --days, and --days + --renew-days "
				"at most --ca-days\n");
		return 2;
	}
	return 0;
}

static int run_all(struct run *r, char *err, size_t errlen)
{
	char svc[3][300];
	snprintf(svc[0], sizeof(svc[0]), "%s.%s.svc", r->o.service, r->o.ns);
	snprintf(svc[1], sizeof(svc[1]), "%s.%s.svc.cluster.local", r->o.service, r->o.ns);
	snprintf(svc[2], sizeof(svc[2]), "%s.%s", r->o.service, r->o.ns);
	const char *dns[] = { svc[0], svc[1], svc[2] };
	struct buf bundle;
	buf_init(&bundle, 4 * PEM_CAP);
	struct certs_ca *ca = ensure_ca(r, &bundle, err, errlen);
	int rc = ca ? 0 : -1;
	if (!rc)
		rc = ensure_leaf(r, ca, &bundle, "gpu-extender-webhook-tls", CERTS_SERVER, svc[0], dns, 3, err, errlen);
	if (!rc)
		rc = ensure_leaf(r, ca, &bundle, "gpu-scheduler-extender-client", CERTS_CLIENT, r->o.client_cn, NULL, 0,
				 err, errlen);
	if (!rc)
		rc = ensure_client_ca(r, &bundle, err, errlen);
	if (!rc)
		rc = fill_ca_bundle(r, &bundle, err, errlen);
	certs_ca_free(ca);
	buf_release(&bundle);
	return rc;
}

int certs_main(int argc, char **argv)
{
	struct run r = { .now = time(NULL) };
	int prc = parse(argc, argv, &r.o);
	if (prc)
		return prc == 1 ? 0 : 2;
	log_setup(LOG_INFO, r.o.log_json);
	char err[512] = "";
	struct kube_config kc;
	kube_config_init(&kc);
	int rc = r.o.kubeconfig ? kube_config_load(&kc, r.o.kubeconfig, r.o.context, err, sizeof(err))
				: kube_config_in_cluster(&kc, err, sizeof(err));
	if (!rc && !(r.kc = kube_client_new(&kc, err, sizeof(err))))
		rc = -1;
	kube_config_release(&kc);
	if (!rc)
		rc = run_all(&r, err, sizeof(err));
	kube_client_free(r.kc);
	if (rc) {
		log_error("certificates not made", "error=\"%s\"", LOG_Q(err));
		return 1;
	}
	log_info("certificates in place", "namespace=%s written=%d", r.o.ns, r.written);
	return 0;
}
