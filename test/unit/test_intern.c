/* intern: one shared copy per distinct string, bounded, from any thread. */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>

static void test_one_copy_per_string(void **state)
{
	(void)state;
	char a[32], b[32];
	snprintf(a, sizeof(a), "NVIDIA H100 80GB HBM3");
	snprintf(b, sizeof(b), "NVIDIA H100 80GB HBM3");
	const char *x = intern(a), *y = intern(b);
	assert_non_null(x);
	assert_ptr_equal(x, y);              /* equal strings: one copy */
	assert_ptr_not_equal(x, a);          /* a copy, not the caller's buffer */
	a[0] = 'X';
	assert_string_equal(x, "NVIDIA H100 80GB HBM3");
	assert_ptr_not_equal(intern("NVIDIA H100"), x);
	assert_string_equal(intern(NULL), "");
	assert_string_equal(intern(""), "");
}

static void test_longer_than_the_limit(void **state)
{
	(void)state;
	char s[INTERN_MAX_LEN + 2];
	memset(s, 'a', sizeof(s) - 1);
	s[INTERN_MAX_LEN + 1] = '\0';
	assert_null(intern(s));
	s[INTERN_MAX_LEN] = '\0';
	const char *kept = intern(s);
	assert_non_null(kept);
	assert_int_equal(strlen(kept), INTERN_MAX_LEN);
}

struct racer {
	int seed;
	const char *got[64];
};

static void *race(void *arg)
{
	struct racer *r = arg;
	for (int k = 0; k < 64; k++) {
		char s[32];
		snprintf(s, sizeof(s), "race-%d", (k * 7 + r->seed) % 64);
		r->got[(k * 7 + r->seed) % 64] = intern(s);
	}
	return NULL;
}

/* Threads interning the same strings at once get the same copies. */
static void test_from_many_threads(void **state)
{
	(void)state;
	struct racer r[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		r[i].seed = i * 13;
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (int k = 0; k < 64; k++) {
		char s[32];
		snprintf(s, sizeof(s), "race-%d", k);
		for (int i = 0; i < 4; i++) {
			assert_non_null(r[i].got[k]);
			assert_ptr_equal(r[i].got[k], r[0].got[k]);
		}
		assert_string_equal(r[0].got[k], s);
	}
}

/*
 * Labels have a pool of their own: filled up (every node's hostname, say),
 * it still finds what it holds, and the device strings' pool is untouched.
 */
static void test_label_pool_apart(void **state)
{
	(void)state;
	const char *zone = intern_label("us-central1-a");
	assert_non_null(zone);
	assert_ptr_equal(intern_label("us-central1-a"), zone);
	char s[32];
	int added = 1;
	for (int k = 0; k <= INTERN_MAX_LABELS; k++) {
		snprintf(s, sizeof(s), "node-%05d", k);
		if (!intern_label(s))
			break;
		added++;
	}
	assert_int_equal(added, INTERN_MAX_LABELS);   /* the zone and the hostnames up to the bound */
	assert_null(intern_label("gpu-pool-new"));
	assert_ptr_equal(intern_label("us-central1-a"), zone);
	assert_non_null(intern("a device string after the labels' pool filled"));
}

/* Last: it fills the process's pool. Past the bound only strings already there are found. */
static void test_bounded(void **state)
{
	(void)state;
	const char *first = intern("bound-0");
	int added = 0;
	char s[32];
	for (int k = 1; k <= INTERN_MAX_STRINGS; k++) {
		snprintf(s, sizeof(s), "bound-%d", k);
		if (!intern(s))
			break;
		added++;
	}
	assert_true(added < INTERN_MAX_STRINGS);   /* the pool filled up before all were added */
	snprintf(s, sizeof(s), "bound-%d", added + 1);
	assert_null(intern(s));                     /* still full */
	assert_ptr_equal(intern("bound-0"), first); /* what is there is still found */
	snprintf(s, sizeof(s), "bound-%d", added);
	assert_non_null(intern(s));
	assert_string_equal(intern(""), "");        /* needs no room */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_copy_per_string),
		cmocka_unit_test(test_longer_than_the_limit),
		cmocka_unit_test(test_from_many_threads),
		cmocka_unit_test(test_label_pool_apart),
		cmocka_unit_test(test_bounded),
	};
	return cmocka_run_group_tests_name("intern", tests, NULL, NULL);
}
