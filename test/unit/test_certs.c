/* The PKI of `gpu-extender certs`: what it issues, and when it keeps a certificate. */
#include "certs.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#define DAY 86400L
static const time_t NOW = 1900000000;
static const char *const DNS[] = { "gpu-extender.gpu-system.svc", "gpu-extender.gpu-system.svc.cluster.local" };

struct pair {
	struct buf crt, key;
};

static void pair_init(struct pair *p)
{
	buf_init(&p->crt, 1 << 16);
	buf_init(&p->key, 1 << 16);
}

static void pair_release(struct pair *p)
{
	buf_release(&p->crt);
	buf_release(&p->key);
}

static struct certs_ca *ca_or_fail(void)
{
	char err[256] = "";
	struct certs_ca *ca = certs_ca_new("test-ca", 3650, NOW, err, sizeof(err));
	if (!ca)
		fail_msg("%s", err);
	return ca;
}

static void issued_server_certificate_is_kept(void **state)
{
	(void)state;
	struct certs_ca *ca = ca_or_fail();
	struct pair p;
	pair_init(&p);
	char err[256] = "", why[256] = "";
	assert_int_equal(certs_issue(ca, CERTS_SERVER, DNS[0], DNS, 2, 365, NOW, &p.crt, &p.key, err, sizeof(err)), 0);
	assert_non_null(strstr(buf_cstr(&p.crt), "BEGIN CERTIFICATE"));
	assert_non_null(strstr(buf_cstr(&p.key), "PRIVATE KEY"));
	bool kept = certs_keep(ca, buf_cstr(&p.crt), buf_cstr(&p.key), DNS, 2, NOW + DAY, 30 * DAY, why, sizeof(why));
	if (!kept)
		fail_msg("not kept: %s", why);
	/* 30 days before the end it is renewed */
	assert_false(certs_keep(ca, buf_cstr(&p.crt), buf_cstr(&p.key), DNS, 2, NOW + 340 * DAY, 30 * DAY, why,
				sizeof(why)));
	assert_non_null(strstr(why, "renewal window"));
	pair_release(&p);
	certs_ca_free(ca);
}

static void other_ca_wrong_name_or_key_is_not_kept(void **state)
{
	(void)state;
	struct certs_ca *ca = ca_or_fail(), *other = ca_or_fail();
	struct pair p, q;
	pair_init(&p);
	pair_init(&q);
	char err[256] = "", why[256] = "";
	assert_int_equal(certs_issue(other, CERTS_SERVER, DNS[0], DNS, 1, 365, NOW, &p.crt, &p.key, err, sizeof(err)),
			 0);
	assert_false(certs_keep(ca, buf_cstr(&p.crt), buf_cstr(&p.key), DNS, 1, NOW, 0, why, sizeof(why)));
	assert_non_null(strstr(why, "current CA"));
	/* names only the first: the second is missing */
	assert_false(certs_keep(other, buf_cstr(&p.crt), buf_cstr(&p.key), DNS, 2, NOW, 0, why, sizeof(why)));
	assert_non_null(strstr(why, DNS[1]));
	/* another certificate's key */
	assert_int_equal(certs_issue(other, CERTS_CLIENT, "gpu-scheduler", NULL, 0, 365, NOW, &q.crt, &q.key, err,
				     sizeof(err)),
			 0);
	assert_false(certs_keep(other, buf_cstr(&p.crt), buf_cstr(&q.key), NULL, 0, NOW, 0, why, sizeof(why)));
	assert_non_null(strstr(why, "key"));
	assert_false(certs_keep(other, "not PEM", buf_cstr(&p.key), NULL, 0, NOW, 0, why, sizeof(why)));
	pair_release(&p);
	pair_release(&q);
	certs_ca_free(ca);
	certs_ca_free(other);
}

static void ca_round_trips_and_caps_lifetimes(void **state)
{
	(void)state;
	char err[256] = "", why[256] = "";
	struct certs_ca *ca = certs_ca_new("short-ca", 100, NOW, err, sizeof(err));
	assert_non_null(ca);
	struct pair c, p;
	pair_init(&c);
	pair_init(&p);
	assert_int_equal(certs_ca_pem(ca, &c.crt, &c.key), 0);
	struct certs_ca *back = certs_ca_load(buf_cstr(&c.crt), buf_cstr(&c.key), err, sizeof(err));
	assert_non_null(back);
	assert_true(certs_ca_expiry(back) == NOW + 100 * DAY);
	/* a leaf never outlives its CA */
	assert_int_equal(certs_issue(back, CERTS_CLIENT, "gpu-scheduler", NULL, 0, 365, NOW, &p.crt, &p.key, err,
				     sizeof(err)),
			 0);
	assert_true(certs_keep(ca, buf_cstr(&p.crt), buf_cstr(&p.key), NULL, 0, NOW + 60 * DAY, 30 * DAY, why,
			       sizeof(why)));
	assert_false(certs_keep(ca, buf_cstr(&p.crt), buf_cstr(&p.key), NULL, 0, NOW + 80 * DAY, 30 * DAY, why,
				sizeof(why)));
	/* a leaf is not a CA */
	assert_null(certs_ca_load(buf_cstr(&p.crt), buf_cstr(&p.key), err, sizeof(err)));
	assert_non_null(strstr(err, "not a CA"));
	certs_ca_free(back);
	certs_ca_free(ca);
	pair_release(&c);
	pair_release(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(issued_server_certificate_is_kept),
		cmocka_unit_test(other_ca_wrong_name_or_key_is_not_kept),
		cmocka_unit_test(ca_round_trips_and_caps_lifetimes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
