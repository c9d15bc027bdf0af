/* buf, strnum, strmap, yamljson, log quoting, slab, jsonscan and heap. */
#include "testutil.h"

#include "buf.h"
#include "heap.h"
#include "jsonscan.h"
#include "keyset.h"
#include "log.h"
#include "slab.h"
#include "strmap.h"
#include "strnum.h"
#include "yamljson.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* A trim no sooner than the gap after the last one; of threads that ask at once, one trims. */
struct claim_race {
	_Atomic int64_t *last;
	atomic_int won;
};

static void *claim_once(void *arg)
{
	struct claim_race *c = arg;
	if (heap_trim_claim(c->last, 5000, 1000))
		atomic_fetch_add(&c->won, 1);
	return NULL;
}

static void test_heap_trim_claim(void **state)
{
	(void)state;
	_Atomic int64_t last = 0;
	assert_false(heap_trim_claim(&last, 999, 1000));
	assert_int_equal(atomic_load(&last), 0);              /* a refused claim leaves the last trim */
	assert_true(heap_trim_claim(&last, 1000, 1000));
	assert_int_equal(atomic_load(&last), 1000);
	assert_false(heap_trim_claim(&last, 1999, 1000));     /* a burst drained again within the gap */
	assert_false(heap_trim_claim(&last, 60999, 60000));   /* the minute's tick, a minute not gone */
	assert_true(heap_trim_claim(&last, 61000, 60000));
	assert_true(heap_trim_claim(&last, 62000, 1000));     /* after a tick, the next drain's gap */

	struct claim_race c = { .last = &last };
	atomic_store(&last, 0);
	pthread_t t[8];
	for (int i = 0; i < 8; i++)
		assert_int_equal(pthread_create(&t[i], NULL, claim_once, &c), 0);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(atomic_load(&c.won), 1);
	assert_int_equal(atomic_load(&last), 5000);
}

static void test_buf_cap_and_growth(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 1000);
	assert_string_equal(buf_cstr(&b), "");
	for (int i = 0; i < 99; i++)
		assert_int_equal(buf_adds(&b, "0123456789"), 0);
	assert_int_equal(b.len, 990);
	assert_int_equal(buf_adds(&b, "0123456789X"), BUF_ETOOBIG);
	assert_int_equal(b.len, 990);          /* a refused append changes nothing */
	assert_int_equal(buf_printf(&b, "%d", 123456789), 0);
	assert_int_equal(b.len, 999);
	assert_int_equal(buf_addc(&b, 'x'), 0);
	assert_int_equal(buf_addc(&b, 'y'), BUF_ETOOBIG);
	size_t len;
	char *p = buf_detach(&b, &len);
	assert_int_equal(len, 1000);
	assert_int_equal(p[1000], '\0');
	free(p);
	assert_int_equal(b.len, 0);
	buf_release(&b);
}

static void test_buf_printf_long(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 1 << 20);
	char big[3000];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(buf_printf(&b, "<%s>", big), 0);
	assert_int_equal(b.len, sizeof(big) + 1);
	assert_int_equal(b.data[b.len - 1], '>');
	buf_release(&b);
}

static void test_buf_json_escape(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 1024);
	assert_int_equal(buf_add_json_str(&b, "a\"b\\c\nd\x01\te"), 0);
	assert_string_equal(buf_cstr(&b), "\"a\\\"b\\\\c\\nd\\u0001\\te\"");
	buf_release(&b);
}

static void test_strnum(void **state)
{
	(void)state;
	int64_t v;
	assert_true(strnum_i64("42", &v) && v == 42);
	assert_false(strnum_i64("42x", &v));
	assert_false(strnum_i64("", &v));
	assert_false(strnum_i64(" 1", &v));
	assert_false(strnum_i64("99999999999999999999", &v));
	int i;
	assert_true(strnum_int("7", 0, 10, &i) && i == 7);
	assert_false(strnum_int("11", 0, 10, &i));
	uint32_t u;
	assert_false(strnum_u32("-1", &u));
	assert_true(strnum_quantity("2", 1000, &v) && v == 2000);
	assert_true(strnum_quantity("500m", 1000, &v) && v == 500);
	assert_true(strnum_quantity("1.5", 1000, &v) && v == 1500);
	assert_true(strnum_quantity("16Gi", 1, &v) && v == 17179869184LL);
	assert_true(strnum_quantity("1e3", 1, &v) && v == 1000);
	assert_true(strnum_quantity("3k", 1, &v) && v == 3000);
	assert_true(strnum_quantity("1", 1, &v) && v == 1);
	assert_false(strnum_quantity("1Qi", 1, &v));
	assert_false(strnum_quantity("abc", 1, &v));
	assert_false(strnum_quantity("", 1, &v));
	assert_false(strnum_quantity("9Ei", 1000, &v));
	char small[4];
	assert_false(str_copy(small, sizeof(small), "hello"));
	assert_string_equal(small, "hel");
}

static void test_strmap(void **state)
{
	(void)state;
	struct strmap m;
	strmap_init(&m);
	char key[32];
	for (long i = 0; i < 5000; i++) {
		snprintf(key, sizeof(key), "node-%ld", i);
		assert_int_equal(strmap_put(&m, key, (void *)(i + 1), NULL), 0);
	}
	assert_int_equal(m.len, 5000);
	for (long i = 0; i < 5000; i += 2) {
		snprintf(key, sizeof(key), "node-%ld", i);
		assert_ptr_equal(strmap_del(&m, key), (void *)(i + 1));
	}
	assert_int_equal(m.len, 2500);
	assert_null(strmap_get(&m, "node-0"));
	assert_ptr_equal(strmap_get(&m, "node-1"), (void *)2);
	void *old;
	assert_int_equal(strmap_put(&m, "node-1", (void *)99, &old), 0);
	assert_ptr_equal(old, (void *)2);
	/* Churn through tombstones: the table must not fill up with them. */
	for (long i = 0; i < 100000; i++) {
		snprintf(key, sizeof(key), "tmp-%ld", i);
		assert_int_equal(strmap_put(&m, key, (void *)1, NULL), 0);
		assert_non_null(strmap_del(&m, key));
	}
	size_t n = 0, pos = 0;
	const char *k;
	void *v;
	while (strmap_next(&m, &pos, &k, &v))
		n++;
	assert_int_equal(n, 2500);
	strmap_release(&m);
}

/*
 * Records found by the key they hold: one replaced under its key and then
 * freed, deleted, looked up across growths and a rehash of mostly deleted
 * slots, and deleted while iterating; nothing of the set reads a freed
 * record (AddressSanitizer would report it).
 */
struct keyed {
	long n;
	char key[24];
};

static struct keyed *keyed_new(const char *key, long n)
{
	struct keyed *v = malloc(sizeof(*v));
	assert_non_null(v);
	v->n = n;
	snprintf(v->key, sizeof(v->key), "%s", key);
	return v;
}

static const char *keyed_key(const void *rec)
{
	return ((const struct keyed *)rec)->key;
}

static void test_keyset(void **state)
{
	(void)state;
	struct keyset s;
	keyset_init(&s, keyed_key);
	assert_null(keyset_get(&s, "uid-0"));
	assert_null(keyset_del(&s, "uid-0"));
	char key[24];
	for (long i = 0; i < 3000; i++) {
		snprintf(key, sizeof(key), "uid-%ld", i);
		assert_int_equal(keyset_put(&s, keyed_new(key, i), NULL), 0);
	}
	assert_int_equal(s.cap, 4096);   /* at most three quarters full */
	for (long i = 0; i < 3000; i += 3) {   /* replaced: the old record comes back */
		snprintf(key, sizeof(key), "uid-%ld", i);
		struct keyed *old = NULL;
		assert_int_equal(keyset_put(&s, keyed_new(key, -i), (void **)&old), 0);
		assert_non_null(old);
		assert_int_equal(old->n, i);
		free(old);
	}
	for (long i = 1; i < 3000; i += 3) {   /* deleted */
		snprintf(key, sizeof(key), "uid-%ld", i);
		struct keyed *v = keyset_del(&s, key);
		assert_non_null(v);
		assert_int_equal(v->n, i);
		free(v);
	}
	assert_int_equal(s.len, 2000);
	for (long i = 0; i < 3000; i++) {
		snprintf(key, sizeof(key), "uid-%ld", i);
		struct keyed *v = keyset_get(&s, key);
		if (i % 3 == 1) {
			assert_null(v);
			continue;
		}
		assert_non_null(v);
		assert_int_equal(v->n, i % 3 ? i : -i);
	}
	/* Churn: records come and go; deleted slots are reused or rehashed away, the table stays its size. */
	size_t cap = s.cap;
	unsigned rehashes = s.rehashes;
	assert_true(rehashes >= 8);   /* 16 slots grown to 4096 */
	for (long i = 0; i < 50000; i++) {
		snprintf(key, sizeof(key), "churn-%ld", i);
		assert_int_equal(keyset_put(&s, keyed_new(key, i), NULL), 0);
		free(keyset_del(&s, key));
	}
	assert_int_equal(s.len, 2000);
	assert_int_equal(s.cap, cap);
	assert_true(s.rehashes > rehashes);   /* the deleted slots went in a rehash: the records moved */
	rehashes = s.rehashes;
	/* A replacement and a deletion move no record. */
	struct keyed *was = NULL;
	assert_int_equal(keyset_put(&s, keyed_new("uid-0", 7), (void **)&was), 0);
	assert_non_null(was);
	free(was);
	free(keyset_del(&s, "uid-3"));
	assert_int_equal(s.rehashes, rehashes);
	assert_int_equal(s.len, 1999);
	/* Deleting while iterating: every record seen once. */
	size_t seen = 0;
	struct keyed *v;
	for (size_t pos = 0; (v = keyset_next(&s, &pos));) {
		seen++;
		assert_ptr_equal(keyset_del(&s, v->key), v);
		free(v);
	}
	assert_int_equal(seen, 1999);
	assert_int_equal(s.len, 0);
	keyset_release(&s);
	assert_int_equal(s.cap, 0);
	assert_ptr_equal(s.key_of, keyed_key);
}

/* Deleting while iterating (the relist sweeps do): every entry seen once. */
/*
 * The hash reads every byte of a key of any length (the last partial word
 * is assembled from overlapping loads), and only the key's bytes: the same
 * key at any address hashes alike, and changing any one byte changes it.
 */
static void test_strmap_hash_every_byte(void **state)
{
	(void)state;
	char buf[64], moved[80];
	for (size_t len = 0; len <= 40; len++) {
		for (size_t i = 0; i < len; i++)
			buf[i] = (char)('a' + (i * 7) % 26);
		buf[len] = '\0';
		size_t h = strmap_hash(buf);
		for (size_t at = 1; at < 9; at++) {
			memset(moved, 'Z', sizeof(moved));
			memcpy(moved + at, buf, len + 1);
			assert_true(strmap_hash(moved + at) == h);
		}
		for (size_t i = 0; i < len; i++) {
			char was = buf[i];
			buf[i] = (char)(was ^ 0x20);
			assert_true(strmap_hash(buf) != h);
			buf[i] = was;
		}
	}
}

static void test_strmap_del_while_iterating(void **state)
{
	(void)state;
	struct strmap m;
	strmap_init(&m);
	char key[32];
	for (long i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "node-%ld", i);
		assert_int_equal(strmap_put(&m, key, (void *)(i + 1), NULL), 0);
	}
	size_t seen = 0, pos = 0;
	const char *k;
	void *v;
	unsigned rehashes = m.rehashes;
	assert_true(rehashes >= 7);   /* 16 slots grown to 2048 */
	while (strmap_next(&m, &pos, &k, &v)) {
		seen++;
		if ((long)v % 2)
			assert_ptr_equal(strmap_del(&m, k), v);
	}
	assert_int_equal(seen, 1000);
	assert_int_equal(m.len, 500);
	assert_int_equal(m.rehashes, rehashes);   /* deletions move no entry */
	strmap_put(&m, "node-0", (void *)7, NULL);   /* a put that finds room moves none either */
	assert_int_equal(m.rehashes, rehashes);
	strmap_del(&m, "node-0");
	assert_null(strmap_get(&m, "node-0"));
	assert_ptr_equal(strmap_get(&m, "node-1"), (void *)2);
	strmap_release(&m);
}

static void test_yamljson(void **state)
{
	(void)state;
	char err[256];
	const char *yaml =
		"kind: List\n"
		"items:\n"
		"- name: a\n"
		"  count: 8\n"
		"  ratio: 1.5\n"
		"  quoted: \"8\"\n"
		"  octal: 0755\n"
		"  flag: true\n"
		"  none: ~\n"
		"  list: [x, y]\n";
	cJSON *j = yamljson_parse(yaml, strlen(yaml), err, sizeof(err));
	assert_non_null(j);
	const cJSON *it = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "items"), 0);
	assert_true(cJSON_IsNumber(cJSON_GetObjectItem(it, "count")));
	assert_true(cJSON_GetObjectItem(it, "ratio")->valuedouble == 1.5);
	assert_true(cJSON_IsString(cJSON_GetObjectItem(it, "quoted")));
	assert_true(cJSON_IsString(cJSON_GetObjectItem(it, "octal")));
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(it, "flag")));
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(it, "none")));
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(it, "list")), 2);
	cJSON_Delete(j);
	j = yamljson_parse("{\"a\":1}", 7, err, sizeof(err));
	assert_non_null(j);
	cJSON_Delete(j);
	assert_null(yamljson_parse("{\"a\":", 5, err, sizeof(err)));
	assert_non_null(strstr(err, "invalid JSON"));
	assert_null(yamljson_parse("a: [1, 2\n", 9, err, sizeof(err)));
	assert_non_null(strstr(err, "YAML error"));
	assert_null(yamljson_load("/nonexistent/file.yaml", 1024, err, sizeof(err)));
	assert_non_null(strstr(err, "/nonexistent/file.yaml"));
}

static void test_log_quote(void **state)
{
	(void)state;
	char out[64];
	assert_string_equal(log_quote("User \"x\" can\\not\nlist", out, sizeof(out)),
			    "User \\\"x\\\" can\\\\not list");
	assert_string_equal(log_quote(NULL, out, sizeof(out)), "");
	char small[5];
	log_quote("\"\"\"\"", small, sizeof(small));
	assert_true(strlen(small) <= 4);     /* never cuts an escape in half past the end */
}

/* Every value kind, valid and not: jsonscan_skip agrees with cJSON on what is JSON. */
static void test_jsonscan_skip(void **state)
{
	(void)state;
	static const char *const good[] = {
		"0", "-0.5e+10", "12E3", "true", "false", "null", "\"\"", "\"a\\\"\\u00e9\"", "[]", "{}",
		"\"gr\xc3\xbc\xc3\x9f" "e \xe2\x82\xac \xf0\x9f\x98\x80 long enough for a word step\"",
		"[1,[2,{\"a\":[null]}],\"x\"]", " { \"k\" : 1 , \"l\" : [ ] } ",
	};
	static const char *const bad[] = {
		"", "01", "-", "1.", ".5", "1e", "tru", "nul", "\"abc", "\"a\\x\"", "\"\\u12g4\"", "\"a\nb\"",
		"[1,]", "[1 2]", "{\"a\"}", "{\"a\":}", "{a:1}", "{\"a\":1,}", "[", "]", "{\"a\":1]", "+1",
		/* not UTF-8: a stray continuation byte, a bad lead, a cut sequence, an overlong
		 * form, a surrogate, past U+10FFFF, and one found by the eight-byte step */
		"\"\x80\"", "\"\xff\"", "\"\xc3\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
		"\"node-name-\xfe-long\"",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct jsonscan s = { good[i], good[i] + strlen(good[i]) };
		if (jsonscan_skip(&s) || !jsonscan_at_end(&s))
			fail_msg("rejected valid %s", good[i]);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct jsonscan s = { bad[i], bad[i] + strlen(bad[i]) };
		if (!jsonscan_skip(&s) && jsonscan_at_end(&s))
			fail_msg("accepted invalid %s", bad[i]);
	}
	/* Nesting: up to the limit, not past it, and no recursion either way. */
	char deep[2 * JSONSCAN_MAX_DEPTH + 4];
	for (int depth = JSONSCAN_MAX_DEPTH; depth <= JSONSCAN_MAX_DEPTH + 1; depth++) {
		memset(deep, '[', (size_t)depth);
		memset(deep + depth, ']', (size_t)depth);
		struct jsonscan s = { deep, deep + 2 * depth };
		assert_int_equal(jsonscan_skip(&s), depth > JSONSCAN_MAX_DEPTH ? -1 : 0);
	}
}

static void test_jsonscan_strings(void **state)
{
	(void)state;
	const char *text = "[\"plain\", \"a\\\"b\\\\c\\/\\n\", \"\\u00e9\\u20ac\\ud83d\\ude00\", \"\\udc00\"]";
	struct jsonscan s = { text, text + strlen(text) };
	assert_int_equal(jsonscan_open(&s, '['), 0);
	int seen = 0;
	char out[64];
	struct json_str lit;
	assert_int_equal(jsonscan_next(&s, '[', &seen, NULL), 1);
	assert_int_equal(jsonscan_string(&s, &lit), 0);
	assert_false(lit.escaped);
	assert_int_equal(json_str_decode(&lit, out), 5);
	assert_string_equal(out, "plain");
	assert_int_equal(jsonscan_next(&s, '[', &seen, NULL), 1);
	assert_int_equal(jsonscan_string(&s, &lit), 0);
	assert_true(lit.escaped);
	assert_int_equal(json_str_decode(&lit, out), 7);
	assert_string_equal(out, "a\"b\\c/\n");
	assert_int_equal(jsonscan_next(&s, '[', &seen, NULL), 1);
	assert_int_equal(jsonscan_string(&s, &lit), 0);
	assert_int_equal(json_str_decode(&lit, out), 2 + 3 + 4);   /* U+00E9, U+20AC, U+1F600 in UTF-8 */
	assert_string_equal(out, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
	assert_int_equal(jsonscan_next(&s, '[', &seen, NULL), 1);
	assert_int_equal(jsonscan_string(&s, &lit), 0);
	assert_int_equal(json_str_decode(&lit, out), -1);   /* a lone low surrogate */
	assert_int_equal(jsonscan_next(&s, '[', &seen, NULL), 0);
	assert_true(jsonscan_at_end(&s));
	/* Long plain strings take the eight-bytes-a-step path; a quote at every offset ends them. */
	for (int at = 0; at < 24; at++) {
		char str[32];
		memset(str, 'x', sizeof(str));
		str[0] = '"';
		str[1 + at] = '"';
		struct jsonscan t = { str, str + 2 + at };
		assert_int_equal(jsonscan_string(&t, &lit), 0);
		assert_int_equal((int)lit.raw_len, 2 + at);
		str[1 + at] = '\x01';   /* a control character is refused wherever it stands */
		str[sizeof(str) - 1] = '"';
		t = (struct jsonscan){ str, str + sizeof(str) };
		assert_int_equal(jsonscan_string(&t, &lit), -1);
	}
	struct json_str key = { "\"NodeNames\"", 11, false };
	assert_true(json_str_ieq(&key, "nodenames"));
	assert_false(json_str_ieq(&key, "NodeName"));
}

static void test_slab(void **state)
{
	(void)state;
	struct slab *s = slab_new();
	void *a = slab_alloc(s, 500), *b = slab_alloc(s, 500), *big = slab_alloc(s, 10000);
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(big);
	assert_int_equal((uintptr_t)a % 64, 0);
	assert_int_equal((char *)b - (char *)a, 512);      /* dense: one after the other */
	memset(a, 1, 500);
	memset(big, 2, 10000);
	slab_release(s, a, 500);
	assert_ptr_equal(slab_alloc(s, 480), a);           /* same size class: reused */
	slab_release(s, big, 10000);
	for (int i = 0; i < 10000; i++)                      /* more than one chunk */
		assert_non_null(slab_alloc(s, 1000));
	slab_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buf_cap_and_growth),
		cmocka_unit_test(test_buf_printf_long),
		cmocka_unit_test(test_buf_json_escape),
		cmocka_unit_test(test_strnum),
		cmocka_unit_test(test_strmap),
		cmocka_unit_test(test_keyset),
		cmocka_unit_test(test_strmap_hash_every_byte),
		cmocka_unit_test(test_strmap_del_while_iterating),
		cmocka_unit_test(test_yamljson),
		cmocka_unit_test(test_log_quote),
		cmocka_unit_test(test_slab),
		cmocka_unit_test(test_jsonscan_skip),
		cmocka_unit_test(test_jsonscan_strings),
		cmocka_unit_test(test_heap_trim_claim),
	};
	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
