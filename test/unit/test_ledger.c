/* The reservation ledger's wire format, names and kubeconfig loading. */
#include "testutil.h"

#include "binding.h"
#include "reserve_edit.h"
#include "update.h"
#include "watch.h"
#include "api.h"
#include "cache.h"
#include "clock.h"
#include "extender.h"
#include "kube.h"
#include "ledger.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static struct ledger_entry entry(const char *uid, enum claim_mode mode, int id0, int n)
{
	struct ledger_entry e;
	memset(&e, 0, sizeof(e));
	snprintf(e.a.uid, sizeof(e.a.uid), "%s", uid);
	char pod[80];
	snprintf(pod, sizeof(pod), "pod-%s", uid);
	ledger_entry_set_pod(&e, "ml", pod);
	e.a.mode = mode;
	for (int i = 0; i < n; i++)
		assert_int_equal(alloc_add_id(&e.a, id0 + i), 0);
	if (mode == CLAIM_SHARED) {
		e.a.mem_mib = 2048;
		e.a.core = 300;
	}
	e.a.since = 1700000000;
	return e;
}

/* Node gpu-a2's ledger, empty, and two pods for it: u1 with whole GPUs 0-1, u2 with a share of GPU 3. */
static void two_pods(struct ledger *l, struct ledger_entry *a, struct ledger_entry *b)
{
	ledger_init(l, "gpu-a2");
	*a = entry("u1", CLAIM_EXCLUSIVE, 0, 2);
	*b = entry("u2", CLAIM_SHARED, 3, 1);
	snprintf(b->claim, sizeof(b->claim), "shared-slice");
}

static void test_roundtrip(void **state)
{
	(void)state;
	struct ledger l;
	struct ledger_entry a, b;
	two_pods(&l, &a, &b);
	/* A gang's place, not a pod's. */
	struct ledger_entry g = entry("gang-0123456789abcdef-1", CLAIM_EXCLUSIVE, 4, 4);
	snprintf(g.gang, sizeof(g.gang), "job-7");
	g.gang_timeout_s = 120;
	assert_int_equal(ledger_add(&l, &a), 0);
	assert_int_equal(ledger_add(&l, &b), 0);
	assert_int_equal(ledger_add(&l, &g), 0);
	snprintf(l.rv, sizeof(l.rv), "4711");
	struct buf out;
	buf_init(&out, 1 << 20);
	assert_int_equal(ledger_encode(&l, "gpu-system", "replica-1", &out), 0);
	cJSON *obj = cJSON_Parse(buf_cstr(&out));
	assert_non_null(obj);
	assert_string_equal(api_str(api_path(obj, "metadata"), "name"), "gpu-ledger.gpu-a2");
	assert_string_equal(api_str(api_path(obj, "metadata"), "resourceVersion"), "4711");
	assert_string_equal(api_label(obj, LEDGER_LABEL), "true");
	/* MicroTime needs exactly six fraction digits. */
	const char *renew = api_str(api_path(obj, "spec"), "renewTime");
	assert_int_equal(strlen(renew), 27);
	assert_int_equal(renew[19], '.');
	assert_int_equal(renew[26], 'Z');
	struct ledger back;
	char err[256];
	assert_int_equal(ledger_decode(obj, &back, err, sizeof(err)), 0);
	assert_string_equal(back.node, "gpu-a2");
	assert_int_equal(back.n, 3);
	int gi = ledger_find(&back, "gang-0123456789abcdef-1");
	assert_true(gi >= 0 && ledger_entry_is_place(&back.e[gi]));
	assert_string_equal(back.e[gi].gang, "job-7");
	assert_int_equal(back.e[gi].gang_timeout_s, 120);
	assert_int_equal(back.e[gi].a.ndev, 4);
	assert_false(ledger_entry_is_place(&back.e[ledger_find(&back, "u1")]));
	ledger_remove_at(&back, gi);
	int i = ledger_find(&back, "u2");
	assert_true(i >= 0);
	assert_int_equal(back.e[i].a.mode, CLAIM_SHARED);
	assert_int_equal(back.e[i].a.mem_mib, 2048);
	assert_int_equal(back.e[i].a.core, 300);
	assert_string_equal(back.e[i].claim, "shared-slice");
	assert_int_equal(alloc_id(&back.e[i].a, 0), 3);
	assert_int_equal(back.e[i].a.since, 1700000000);
	ledger_remove_at(&back, i);
	assert_int_equal(ledger_find(&back, "u2"), -1);
	assert_int_equal(back.n, 1);
	ledger_release(&back);
	ledger_release(&l);
	cJSON_Delete(obj);
	buf_release(&out);
}

static void test_decode_errors(void **state)
{
	(void)state;
	const char *bad[] = {
		"{\"metadata\":{\"annotations\":{}}}",
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/node\":\"n\",\"gpu.scheduling/reservations\":\"{\"}}}",
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/node\":\"n\",\"gpu.scheduling/reservations\":\"[{\\\"uid\\\":\\\"x\\\"}]\"}}}",
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/node\":\"n\",\"gpu.scheduling/reservations\":"
		"\"[{\\\"uid\\\":\\\"x\\\",\\\"namespace\\\":\\\"a\\\",\\\"pod\\\":\\\"p\\\",\\\"devices\\\":[\\\"z\\\"]}]\"}}}",
		/* numbers no integer type holds (found by fuzzing) */
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/node\":\"n\",\"gpu.scheduling/reservations\":"
		"\"[{\\\"uid\\\":\\\"x\\\",\\\"namespace\\\":\\\"a\\\",\\\"pod\\\":\\\"p\\\",\\\"devices\\\":[1e300]}]\"}}}",
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/node\":\"n\",\"gpu.scheduling/reservations\":"
		"\"[{\\\"uid\\\":\\\"x\\\",\\\"namespace\\\":\\\"a\\\",\\\"pod\\\":\\\"p\\\",\\\"devices\\\":[0],"
		"\\\"memoryMiB\\\":7.7e89}]\"}}}",
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/node\":\"n\",\"gpu.scheduling/reservations\":"
		"\"[{\\\"uid\\\":\\\"x\\\",\\\"namespace\\\":\\\"a\\\",\\\"pod\\\":\\\"p\\\",\\\"devices\\\":[0],"
		"\\\"since\\\":-1e30}]\"}}}",
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/node\":\"n\",\"gpu.scheduling/reservations\":"
		"\"[{\\\"uid\\\":\\\"x\\\",\\\"namespace\\\":\\\"a\\\",\\\"pod\\\":\\\"p\\\",\\\"devices\\\":[0],"
		"\\\"gang\\\":\\\"g\\\",\\\"gangTimeoutSeconds\\\":1e9}]\"}}}",
		/* device ids further apart than an allocation keeps */
		"{\"metadata\":{\"annotations\":{\"gpu.scheduling/node\":\"n\",\"gpu.scheduling/reservations\":"
		"\"[{\\\"uid\\\":\\\"x\\\",\\\"namespace\\\":\\\"a\\\",\\\"pod\\\":\\\"p\\\",\\\"devices\\\":[0,65536]}]\"}}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cJSON *obj = cJSON_Parse(bad[i]);
		assert_non_null(obj);
		struct ledger l;
		char err[256] = "";
		assert_int_equal(ledger_decode(obj, &l, err, sizeof(err)), -1);
		assert_true(err[0]);
		cJSON_Delete(obj);
	}
	/* An empty ledger is fine. */
	cJSON *obj = cJSON_Parse("{\"metadata\":{\"resourceVersion\":\"9\",\"annotations\":{\"gpu.scheduling/node\":\"n\"}}}");
	struct ledger l;
	char err[256];
	assert_int_equal(ledger_decode(obj, &l, err, sizeof(err)), 0);
	assert_int_equal(l.n, 0);
	assert_string_equal(l.rv, "9");
	ledger_release(&l);
	cJSON_Delete(obj);
}

static void test_names(void **state)
{
	(void)state;
	char name[300], long_node[260];
	memset(long_node, 'a', 250);
	long_node[250] = '\0';
	ledger_lease_name(long_node, name, sizeof(name));
	assert_true(strlen(name) <= 253);
	char other[300];
	long_node[249] = 'b';
	ledger_lease_name(long_node, other, sizeof(other));
	assert_string_not_equal(name, other);      /* the hash tells them apart */
	ledger_reservation_name("4f7d4a36-b836-4ea2-8963-df55911e571b", "gpu-a2", name, sizeof(name));
	assert_int_equal(strncmp(name, "gpu-reservation.4f7d4a36-b836-4ea2-8963-df55911e571b.", 53), 0);
	assert_int_equal(strlen(name), 53 + 16);
	ledger_reservation_name("4f7d4a36-b836-4ea2-8963-df55911e571b", "gpu-a3", other, sizeof(other));
	assert_string_not_equal(name, other);      /* one per pod and node */
}

static void test_reservation_lease(void **state)
{
	(void)state;
	struct ledger_entry e = entry("u9", CLAIM_EXCLUSIVE, 2, 2);
	struct buf out;
	buf_init(&out, 1 << 16);
	assert_int_equal(ledger_encode_reservation(&e, "gpu-a2", &out), 0);
	cJSON *obj = cJSON_Parse(buf_cstr(&out));
	assert_string_equal(api_str(api_path(obj, "metadata"), "namespace"), "ml");
	const cJSON *owner = cJSON_GetArrayItem(api_path(obj, "metadata.ownerReferences"), 0);
	assert_string_equal(api_str(owner, "kind"), "Pod");
	assert_string_equal(api_str(owner, "uid"), "u9");
	assert_string_equal(api_annotation(obj, ANN_ALLOCATED), "gpu-a2:2,3");
	cJSON_Delete(obj);
	buf_release(&out);
}

/* A ledger Lease exactly as 0.2.0 wrote it: no format version (so version 1). */
#define LEDGER_0_2_0 \
	"{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":\"gpu-ledger.gpu-a2\"," \
	"\"namespace\":\"gpu-system\",\"resourceVersion\":\"12\",\"labels\":{\"gpu.scheduling/ledger\":\"true\"}," \
	"\"annotations\":{%s\"gpu.scheduling/node\":\"gpu-a2\",\"gpu.scheduling/reservations\":\"[{\\\"uid\\\":" \
	"\\\"u1\\\",\\\"namespace\\\":\\\"ml\\\",\\\"pod\\\":\\\"train\\\",\\\"mode\\\":\\\"Exclusive\\\",\\\"devices\\\":" \
	"[0,1],\\\"memoryMiB\\\":0,\\\"coreMilli\\\":0,\\\"since\\\":1700000000,\\\"try\\\":7}]\"}}," \
	"\"spec\":{\"holderIdentity\":\"gpu-extender-1\",\"renewTime\":\"2026-11-29T00:00:00.000000Z\"}}"

/* decode of LEDGER_0_2_0 with extra annotations (e.g. a version) in front: its rc, the ledger in *l when 0 */
static int decode_with(const char *extra, struct ledger *l, char *err, size_t errlen)
{
	char text[2048];
	snprintf(text, sizeof(text), LEDGER_0_2_0, extra);
	cJSON *obj = cJSON_Parse(text);
	assert_non_null(obj);
	int rc = ledger_decode(obj, l, err, errlen);
	cJSON_Delete(obj);
	return rc;
}

/*
 * Stored formats carry a version: 0.2.0's ledger (none) is read as version
 * 1; what this version writes says 1 and reads back; a newer version, or
 * one that is not a number, is refused with the reason, not guessed at.
 */
static void test_format_versions(void **state)
{
	(void)state;
	struct ledger l;
	char err[256] = "";
	assert_int_equal(decode_with("", &l, err, sizeof(err)), 0);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.e[0].name, "train");
	assert_int_equal(alloc_id(&l.e[0].a, 1), 1);
	assert_int_equal(l.e[0].a.token, 7);
	/* written back by this version: the version is stated, the rest as before */
	struct buf out;
	buf_init(&out, 1 << 16);
	assert_int_equal(ledger_encode(&l, "gpu-system", "gpu-extender-2", &out), 0);
	ledger_release(&l);
	cJSON *obj = cJSON_Parse(buf_cstr(&out));
	assert_string_equal(api_annotation(obj, LEDGER_ANN_VERSION), "1");
	assert_int_equal(ledger_decode(obj, &l, err, sizeof(err)), 0);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.e[0].a.uid, "u1");
	assert_int_equal(l.e[0].a.token, 7);
	ledger_release(&l);
	cJSON_Delete(obj);
	buf_release(&out);
	assert_int_equal(decode_with("\"gpu.scheduling/ledger-version\":\"1\",", &l, err, sizeof(err)), 0);
	ledger_release(&l);
	/* newer: refused, whatever the entries look like */
	assert_int_equal(decode_with("\"gpu.scheduling/ledger-version\":\"2\",", &l, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "ledger of gpu-a2: gpu.scheduling/ledger-version 2 is newer than this program reads"));
	assert_int_equal(l.n, 0);
	const char *bad[] = { "0", "-1", "1.5", "two", "", "99999999999" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char extra[96];
		snprintf(extra, sizeof(extra), "\"gpu.scheduling/ledger-version\":\"%s\",", bad[i]);
		err[0] = '\0';
		assert_int_equal(decode_with(extra, &l, err, sizeof(err)), -1);
		assert_non_null(strstr(err, "is not a format version"));
	}
	/* the pod's reservation Lease states it too */
	struct ledger_entry e = entry("u9", CLAIM_EXCLUSIVE, 2, 2);
	buf_init(&out, 1 << 16);
	assert_int_equal(ledger_encode_reservation(&e, "gpu-a2", &out), 0);
	obj = cJSON_Parse(buf_cstr(&out));
	assert_string_equal(api_annotation(obj, LEDGER_ANN_VERSION), "1");
	assert_true(ledger_version_known(obj, err, sizeof(err)));
	cJSON_Delete(obj);
	buf_release(&out);
}

static char dir[] = "/tmp/test-kubeconfig-XXXXXX";

static void write_file(const char *name, const char *text)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_kubeconfig(void **state)
{
	(void)state;
	assert_non_null(mkdtemp(dir));
	/* "LS0tCg==" is base64 of "---\n". */
	write_file("config",
		   "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
		   "clusters:\n"
		   "- name: c1\n  cluster: {server: \"https://10.0.0.1:6443/\", certificate-authority-data: LS0tCg==}\n"
		   "- name: c2\n  cluster: {server: https://10.0.0.2:6443, certificate-authority: ca.crt, insecure-skip-tls-verify: true}\n"
		   "users:\n"
		   "- name: u1\n  user: {token: abc}\n"
		   "- name: u2\n  user: {client-certificate: certs/c.crt, client-key: /abs/c.key}\n"
		   "- name: u3\n  user: {exec: {command: aws}}\n"
		   "contexts:\n"
		   "- name: a\n  context: {cluster: c1, user: u1, namespace: ml}\n"
		   "- name: b\n  context: {cluster: c2, user: u2}\n"
		   "- name: c\n  context: {cluster: c1, user: u3}\n");
	char path[256], err[256];
	snprintf(path, sizeof(path), "%s/config", dir);
	struct kube_config k;
	kube_config_init(&k);
	assert_int_equal(kube_config_load(&k, path, NULL, err, sizeof(err)), 0);
	assert_string_equal(k.server, "https://10.0.0.1:6443");   /* trailing slash dropped */
	assert_string_equal(k.token, "abc");
	assert_string_equal(k.namespace, "ml");
	assert_int_equal(k.ca_pem.len, 4);
	assert_false(k.insecure);
	kube_config_release(&k);
	kube_config_init(&k);
	assert_int_equal(kube_config_load(&k, path, "b", err, sizeof(err)), 0);
	char want[300];
	snprintf(want, sizeof(want), "%s/ca.crt", dir);
	assert_string_equal(k.ca_file, want);                     /* relative to the kubeconfig */
	snprintf(want, sizeof(want), "%s/certs/c.crt", dir);
	assert_string_equal(k.cert_file, want);
	assert_string_equal(k.key_file, "/abs/c.key");
	assert_true(k.insecure);
	kube_config_release(&k);
	kube_config_init(&k);
	assert_int_equal(kube_config_load(&k, path, "c", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "exec/auth-provider"));
	assert_int_equal(kube_config_load(&k, path, "nope", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "no context nope"));
	kube_config_release(&k);
	unlink(path);
	rmdir(dir);
	unsetenv("KUBERNETES_SERVICE_HOST");
	kube_config_init(&k);
	assert_int_equal(kube_config_in_cluster(&k, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "use --kubeconfig"));
	kube_config_release(&k);
}

/* Packed and unpacked, every field of every kind of entry comes back. */
static void test_pack_roundtrip(void **state)
{
	(void)state;
	struct ledger l;
	struct ledger_entry a, b;
	two_pods(&l, &a, &b);
	struct ledger_entry g = entry("gang-0123456789abcdef-1", CLAIM_MIG, 1000, GPU_MAX_DEVICES);
	char longest[sizeof(g.name)];
	memset(longest, 'n', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	ledger_entry_set_pod(&g, "ml", longest);   /* the longest names */
	memset(g.gang, 'g', sizeof(g.gang) - 1);
	g.gang[sizeof(g.gang) - 1] = '\0';
	g.gang_timeout_s = 86400;
	g.a.since = (int64_t)1 << 40;
	g.a.mem_mib = UINT32_MAX;
	struct ledger_entry all[] = { a, b, g };
	for (int i = 0; i < 3; i++)
		assert_int_equal(ledger_add(&l, &all[i]), 0);
	struct ledger_packed p;
	assert_int_equal(ledger_pack(&l, &p), 0);
	assert_int_equal(p.n, 3);
	assert_true(p.block->len < 3 * sizeof(struct ledger_entry) / 2);
	assert_int_equal(p.block->len, p.block->cap);   /* kept for long: no room to spare */
	struct ledger_packed_strs st;
	int seen = 0;
	for (size_t pos = 0; ledger_packed_next_strs(&p, &pos, &st); seen++) {
		assert_string_equal(st.uid, all[seen].a.uid);
		assert_string_equal(st.ns, all[seen].ns);
		assert_string_equal(st.name, all[seen].name);
		assert_string_equal(st.claim, all[seen].claim);
		assert_string_equal(st.gang, all[seen].gang);
	}
	assert_int_equal(seen, 3);
	assert_true(ledger_packed_holds(&p, "u2"));
	assert_true(ledger_packed_holds(&p, "gang-0123456789abcdef-1"));
	assert_false(ledger_packed_holds(&p, "u"));
	struct ledger back;
	assert_int_equal(ledger_unpack(&p, "gpu-a2", "77", &back), 0);
	assert_string_equal(back.node, "gpu-a2");
	assert_string_equal(back.rv, "77");
	assert_int_equal(back.n, 3);
	for (int i = 0; i < 3; i++) {
		const struct ledger_entry *x = &all[i], *y = &back.e[i];
		assert_string_equal(y->a.uid, x->a.uid);
		assert_string_equal(y->a.pod, x->a.pod);
		assert_string_equal(y->ns, x->ns);
		assert_string_equal(y->name, x->name);
		assert_string_equal(y->claim, x->claim);
		assert_string_equal(y->gang, x->gang);
		assert_int_equal(y->a.mode, x->a.mode);
		assert_int_equal(y->a.mem_mib, x->a.mem_mib);
		assert_int_equal(y->a.core, x->a.core);
		assert_int_equal(y->a.since, x->a.since);
		assert_int_equal(y->gang_timeout_s, x->gang_timeout_s);
		assert_int_equal(y->a.ndev, x->a.ndev);
		for (int k = 0; k < x->a.ndev; k++)
			assert_int_equal(alloc_id(&y->a, k), alloc_id(&x->a, k));
	}
	ledger_release(&back);
	ledger_packed_release(&p);
	/* An empty ledger packs to nothing. */
	ledger_release(&l);
	ledger_init(&l, "gpu-a3");
	assert_int_equal(ledger_pack(&l, &p), 0);
	assert_int_equal(p.n, 0);
	assert_int_equal(ledger_unpack(&p, "gpu-a3", "", &back), 0);
	assert_int_equal(back.n, 0);
	assert_false(ledger_packed_holds(&p, "u1"));
	ledger_release(&back);
	ledger_release(&l);
}

/* Feeds a watch sink one event of obj, and frees obj. */
static void feed(struct reflector_sink *sink, bool deleted, cJSON *obj)
{
	assert_non_null(obj);
	sink->lock(sink->ctx);
	sink->apply(sink->ctx, deleted, obj);
	sink->unlock(sink->ctx);
	cJSON_Delete(obj);
}

/* The watched ledger of node n1 at resourceVersion rv, holding pods u1..uN. */
static cJSON *lease_at(const char *rv, int pods)
{
	struct ledger l;
	ledger_init(&l, "n1");
	for (int i = 1; i <= pods; i++) {
		char uid[8];
		snprintf(uid, sizeof(uid), "u%d", i);
		struct ledger_entry e = entry(uid, CLAIM_EXCLUSIVE, i - 1, 1);
		assert_int_equal(ledger_add(&l, &e), 0);
	}
	snprintf(l.rv, sizeof(l.rv), "%s", rv);
	struct buf out;
	buf_init(&out, 1 << 20);
	assert_int_equal(ledger_encode(&l, "gpu-system", "r1", &out), 0);
	cJSON *obj = cJSON_Parse(buf_cstr(&out));
	assert_non_null(obj);
	buf_release(&out);
	ledger_release(&l);
	return obj;
}

/* Feeds one watch event of n1's ledger; returns how many of u1..u8 the cache holds then. */
static int watched(struct reserve *r, struct cache *c, bool deleted, const char *rv, int pods)
{
	struct reflector_sink sink;
	reserve_ledger_sink(r, &sink);
	feed(&sink, deleted, lease_at(rv, pods));
	int held = 0;
	for (int i = 1; i <= 8; i++) {
		char uid[8], node[64];
		struct alloc a;
		snprintf(uid, sizeof(uid), "u%d", i);
		cache_lock(c);
		held += cache_find_alloc(c, uid, &a, node, sizeof(node));
		cache_unlock(c);
	}
	return held;
}

/*
 * A watch event older than the ledger this replica wrote (the write's
 * answer is kept at once, the watch brings the versions in between later)
 * must not take back the allocations written since; newer ones, and
 * versions that are not numbers, are taken as they come.
 */
static void test_watch_never_goes_back(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct reserve_opts o = { .cache = c, .ns = "gpu-system", .identity = "r1" };
	struct reserve *r = reserve_new(&o);
	assert_int_equal(watched(r, c, false, "5", 1), 1);
	/* This replica writes version 7 with three pods. */
	cJSON *v7 = lease_at("7", 3);
	struct ledger l;
	char err[256];
	assert_int_equal(ledger_decode(v7, &l, err, sizeof(err)), 0);
	cJSON_Delete(v7);
	reserve_ledger_written(r, "n1", &l);
	assert_int_equal(watched(r, c, false, "6", 2), 3);    /* late: kept 7 */
	assert_int_equal(watched(r, c, true, "6", 2), 3);     /* deleted before 7 was made */
	assert_int_equal(watched(r, c, false, "7", 3), 3);
	assert_int_equal(watched(r, c, false, "10", 4), 4);   /* newer: taken (a longer number too) */
	assert_int_equal(watched(r, c, false, "9", 2), 4);
	assert_int_equal(watched(r, c, true, "11", 4), 0);    /* deleted after: gone */
	assert_int_equal(watched(r, c, false, "x1", 2), 2);   /* not numbers: not compared */
	assert_int_equal(watched(r, c, false, "1", 1), 1);
	reserve_free(r);
	cache_free(c);
}

/* Feeds the pod watch one event of a pod of uid bound to n1, asking for a GPU. */
static void pod_event(struct reserve *r, bool deleted, const char *uid)
{
	char text[512];
	snprintf(text, sizeof(text),
		 "{\"metadata\":{\"name\":\"pod-%s\",\"namespace\":\"ml\",\"uid\":\"%s\"},\"spec\":{\"nodeName\":\"n1\","
		 "\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]},"
		 "\"status\":{\"phase\":\"Running\"}}",
		 uid, uid);
	struct reflector_sink sink;
	reserve_pod_sink(r, &sink);
	feed(&sink, deleted, cJSON_Parse(text));
}

static bool remembered_gone(struct reserve *r, const char *uid)
{
	pthread_mutex_lock(&r->lock);
	bool gone = strmap_get(&r->gone, uid) != NULL;
	pthread_mutex_unlock(&r->lock);
	return gone;
}

/* n1's ledger as the reservation module keeps it, and how many hold its block. */
static const struct alloc_block *kept_block(struct reserve *r)
{
	pthread_mutex_lock(&r->lock);
	const struct ledger_box *box = keyset_get(&r->ledgers, "n1");
	const struct alloc_block *b = box ? box->p.block : NULL;
	pthread_mutex_unlock(&r->lock);
	return b;
}

/* Whether n1's view in the current snapshot shows the records of block b itself. */
static bool view_shows(struct cache *c, const struct alloc_block *b)
{
	struct snapshot *s = cache_acquire(c);
	const struct cache_node *v = snapshot_find(s, "n1");
	bool shows = v && b && v->allocs == alloc_block_recs(b);
	snapshot_release(s);
	return shows;
}

/*
 * A ledger is kept once: the block the reservation module packs it into
 * is the one the cache's writer side and views show. A change the cache
 * makes on its own (the GPUs of a pod a fresh read found gone, freed at
 * once) goes to a copy, and the kept ledger stays exactly as watched; the
 * next ledger without that pod is shared again. A bind's record that the
 * ledger already holds changes nothing; nor does the pod watch's DELETED
 * (a hint: the pod may only have lost its label).
 */
static void test_ledger_shared_with_the_cache(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	cache_lock(c);
	cache_set_gpus(c, "n1", tu_node("n1", 8, GPU_VENDOR_NVIDIA, "H100", 81559));
	cache_unlock(c);
	struct reserve_opts o = { .cache = c, .ns = "gpu-system", .identity = "r1" };
	struct reserve *r = reserve_new(&o);
	assert_int_equal(watched(r, c, false, "5", 3), 3);
	const struct alloc_block *b = kept_block(r);
	assert_non_null(b);
	assert_true(view_shows(c, b));
	assert_int_equal(atomic_load(&b->refs), 3);   /* the kept ledger, the writer side, the view */
	/* The bind that wrote u1 adds its record again: nothing changes. */
	struct alloc a;
	char node[64];
	struct snapshot *before = cache_acquire(c);
	cache_lock(c);
	assert_true(cache_find_alloc(c, "u1", &a, node, sizeof(node)));
	assert_int_equal(cache_add_alloc(c, "n1", &a), 0);
	cache_unlock(c);
	struct snapshot *after = cache_acquire(c);
	assert_ptr_equal(after, before);
	snapshot_release(after);
	snapshot_release(before);
	assert_true(view_shows(c, b));
	/* The pod watch says u2 went: nothing changes until a read confirms it. */
	pod_event(r, true, "u2");
	assert_true(view_shows(c, b));
	/* A read found u2 gone: its GPUs are free in the cache at once, in a copy; the ledger kept is as watched. */
	pthread_mutex_lock(&r->lock);
	reserve_mark_gone(r, "u2");
	pthread_mutex_unlock(&r->lock);
	assert_false(view_shows(c, b));
	assert_ptr_equal(kept_block(r), b);
	pthread_mutex_lock(&r->lock);
	const struct ledger_box *box = keyset_get(&r->ledgers, "n1");
	assert_int_equal(box->p.n, 3);
	assert_true(ledger_packed_holds(&box->p, "u2"));
	pthread_mutex_unlock(&r->lock);
	assert_int_equal(atomic_load(&b->refs), 1);
	/* A new version still holding u2: the cache leaves it out (a copy again). */
	assert_int_equal(watched(r, c, false, "6", 3), 2);
	assert_false(view_shows(c, kept_block(r)));
	/* The reaper released u2: shared again. */
	assert_int_equal(watched(r, c, false, "7", 1), 1);
	assert_true(view_shows(c, kept_block(r)));
	reserve_free(r);
	cache_free(c);
}

/* Makes the pod's deletion age seconds old. */
static void age_gone(struct reserve *r, const char *uid, time_t age)
{
	pthread_mutex_lock(&r->lock);
	strmap_put(&r->gone, uid, (void *)(intptr_t)(time(NULL) - age), NULL);
	pthread_mutex_unlock(&r->lock);
}

/* A reservation module for the reaper's tests: its API server refuses at once (a release fails). */
struct reaper_rig {
	struct kube_client *client;
	struct cache *c;
	struct api_resources res;
	struct reserve *r;
};

static void rig_up(struct reaper_rig *g)
{
	struct kube_config kc;
	kube_config_init(&kc);
	snprintf(kc.server, sizeof(kc.server), "http://127.0.0.1:1");
	char err[256];
	g->client = kube_client_new(&kc, err, sizeof(err));
	kube_config_release(&kc);
	assert_non_null(g->client);
	g->c = cache_new();
	api_resources_default(&g->res);
	struct reserve_opts o = { .client = g->client, .cache = g->c, .res = &g->res, .ns = "gpu-system",
				  .identity = "r1", .bind_timeout_s = 60 };
	g->r = reserve_new(&o);
}

static void rig_down(struct reaper_rig *g)
{
	reserve_free(g->r);
	cache_free(g->c);
	kube_client_free(g->client);
}

/* What a fresh read found: the pod gone (the reaper marks it so). */
static void read_gone(struct reserve *r, const char *uid)
{
	pthread_mutex_lock(&r->lock);
	reserve_mark_gone(r, uid);
	pthread_mutex_unlock(&r->lock);
}

/*
 * A deleted pod's uid is remembered while a ledger holds it (here its
 * release fails: no API server answers) or a bind of it may still be in
 * flight, and forgotten after that, so that under a steady churn of pods
 * the set stays small; at the latest it goes after ten minutes.
 */
static void test_gone_forgotten_once_released(void **state)
{
	(void)state;
	struct reaper_rig g;
	rig_up(&g);
	struct reserve *r = g.r;
	struct cache *c = g.c;
	/* u1 holds a GPU in n1's ledger, u2 holds nothing; both are deleted (as read). */
	assert_int_equal(watched(r, c, false, "5", 1), 1);
	pod_event(r, false, "u1");
	pod_event(r, false, "u2");
	pod_event(r, true, "u1");
	pod_event(r, true, "u2");
	read_gone(r, "u1");
	read_gone(r, "u2");
	reserve_reap(r);
	assert_true(remembered_gone(r, "u1"));
	assert_true(remembered_gone(r, "u2"));   /* a bind of it may be in flight */
	age_gone(r, "u1", 61);
	age_gone(r, "u2", 61);
	reserve_reap(r);
	assert_true(remembered_gone(r, "u1"));   /* its release failed: the ledger still holds it */
	assert_false(remembered_gone(r, "u2"));
	age_gone(r, "u1", 601);
	reserve_reap(r);
	assert_false(remembered_gone(r, "u1"));
	rig_down(&g);
}

/* The pass that last found the pod in a ledger, or 0 when unknown. */
static uint32_t held_in(struct reserve *r, const char *uid)
{
	pthread_mutex_lock(&r->lock);
	const struct pod_state *p = keyset_get(&r->pods, uid);
	uint32_t pass = p ? p->held_in_pass : 0;
	pthread_mutex_unlock(&r->lock);
	return pass;
}

/*
 * A reaper pass marks the watched pods some ledger holds (it then puts
 * back only the reservations of bound pods no ledger holds): u1 and u2 are
 * in n1's ledger, u9 in none; a pod whose entry went is no longer marked.
 */
static void test_reaper_marks_held_pods(void **state)
{
	(void)state;
	struct reaper_rig g;
	rig_up(&g);
	struct reserve *r = g.r;
	struct cache *c = g.c;
	assert_int_equal(watched(r, c, false, "5", 2), 2);
	pod_event(r, false, "u1");
	pod_event(r, false, "u2");
	pod_event(r, false, "u9");
	reserve_reap(r);
	uint32_t first = r->reap_passes;
	assert_true(first > 0);
	assert_int_equal(held_in(r, "u1"), first);
	assert_int_equal(held_in(r, "u2"), first);
	assert_int_not_equal(held_in(r, "u9"), first);
	assert_int_equal(watched(r, c, false, "6", 1), 1);   /* u2's entry went */
	reserve_reap(r);
	assert_int_equal(held_in(r, "u1"), first + 1);
	assert_int_not_equal(held_in(r, "u2"), first + 1);
	rig_down(&g);
}

/*
 * A pass lets binds and watch events in between slices of its walk. Here
 * it yields every few records while another thread binds pods (ledger
 * first, then the pod, as a bind writes them), onto nodes walked already
 * and nodes new to both tables (which grow: the walk's positions move).
 * Every bound pod is in its ledger all along: no pass may find a
 * reservation to release, a pod to look up or a lost one to put back.
 */
#define SLICED_NODES 64
#define SLICED_PER_NODE 6

struct binder {
	struct reserve *r;
	atomic_bool stop;
	atomic_int binds;
	int nodes;
};

/* Node node's ledger at version rv, holding pods 0..pods-1 of it (uid "<node>-p<k>", GPU k). */
static void node_ledger(struct reserve *r, const char *node, int rv, int pods)
{
	struct ledger l;
	ledger_init(&l, node);
	for (int k = 0; k < pods; k++) {
		char uid[64];
		snprintf(uid, sizeof(uid), "%s-p%d", node, k);
		struct ledger_entry e = entry(uid, CLAIM_EXCLUSIVE, k, 1);
		e.a.since = (int64_t)time(NULL);   /* a bind's entry is new until its pod is seen bound */
		assert_int_equal(ledger_add(&l, &e), 0);
	}
	snprintf(l.rv, sizeof(l.rv), "%d", rv);
	struct buf out;
	buf_init(&out, 1 << 20);
	assert_int_equal(ledger_encode(&l, "gpu-system", "r1", &out), 0);
	struct reflector_sink sink;
	reserve_ledger_sink(r, &sink);
	feed(&sink, false, cJSON_Parse(buf_cstr(&out)));
	buf_release(&out);
	ledger_release(&l);
}

/* Pod k of node, bound there with GPU k (its allocated annotation). */
static void bound_pod(struct reserve *r, const char *node, int k)
{
	char text[768];
	snprintf(text, sizeof(text),
		 "{\"metadata\":{\"name\":\"pod-%s-p%d\",\"namespace\":\"ml\",\"uid\":\"%s-p%d\",\"annotations\":"
		 "{\"" ANN_ALLOCATED "\":\"%s:%d\"}},\"spec\":{\"nodeName\":\"%s\",\"containers\":[{\"name\":\"c\","
		 "\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]},\"status\":{\"phase\":\"Running\"}}",
		 node, k, node, k, node, k, node);
	struct reflector_sink sink;
	reserve_pod_sink(r, &sink);
	feed(&sink, false, cJSON_Parse(text));
}

/* Binds the last pod of each node walked already, then fills new nodes, one bind at a time. */
static void *binder_main(void *arg)
{
	struct binder *b = arg;
	char node[32];
	for (int i = 0; !atomic_load(&b->stop); i++) {
		int n = i < SLICED_NODES ? i : b->nodes++;
		int k = i < SLICED_NODES ? SLICED_PER_NODE - 1 : 0;
		for (; k < SLICED_PER_NODE && !atomic_load(&b->stop); k++) {
			snprintf(node, sizeof(node), "n%d", n);
			node_ledger(b->r, node, 100 + k, k + 1);
			bound_pod(b->r, node, k);
			atomic_fetch_add(&b->binds, 1);
		}
	}
	return NULL;
}

static void test_reaper_walks_in_slices(void **state)
{
	(void)state;
	struct reaper_rig g;
	rig_up(&g);
	struct reserve *r = g.r;
	r->o.reap_slice_ns = 1;   /* a slice every REAP_STEP records */
	char node[32];
	for (int n = 0; n < SLICED_NODES; n++) {   /* all but each node's last pod */
		snprintf(node, sizeof(node), "n%d", n);
		node_ledger(r, node, 10, SLICED_PER_NODE - 1);
		for (int k = 0; k < SLICED_PER_NODE - 1; k++)
			bound_pod(r, node, k);
	}
	struct binder b = { .r = r, .nodes = SLICED_NODES };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, binder_main, &b), 0);
	int passes = 0, sliced = 0, cut = 0, releases = 0, lookups = 0, repairs = 0;
	for (; passes < 400 && (passes < 20 || atomic_load(&b.binds) < 2000); passes++) {
		reserve_reap(r);
		struct reap_stats st;
		reserve_reap_stats(r, &st);
		releases += st.releases;
		lookups += st.lookups;
		repairs += st.repairs;
		sliced += st.holds > 2;
		cut += !st.whole;
	}
	atomic_store(&b.stop, true);
	pthread_join(t, NULL);
	assert_int_equal(releases, 0);
	assert_int_equal(lookups, 0);
	assert_int_equal(repairs, 0);
	assert_true(sliced > 0);
	print_message("      %d passes (%d sliced, %d cut short by a rehash) beside %d binds\n", passes, sliced, cut, atomic_load(&b.binds));
	/* Quiet again: a whole pass, in slices, finds nothing either. */
	reserve_reap(r);
	struct reap_stats st;
	reserve_reap_stats(r, &st);
	assert_true(st.whole);
	assert_true(st.holds > 2);
	assert_int_equal(st.releases + st.lookups + st.repairs, 0);
	rig_down(&g);
}


/* Whether the cache holds the pod's allocation. */
static bool cached(struct cache *c, const char *uid)
{
	struct alloc a;
	char node[64];
	cache_lock(c);
	bool held = cache_find_alloc(c, uid, &a, node, sizeof(node));
	cache_unlock(c);
	return held;
}

/* One pass; its stats. */
static struct reap_stats pass(struct reserve *r)
{
	reserve_reap(r);
	struct reap_stats st;
	reserve_reap_stats(r, &st);
	return st;
}

/*
 * The pod watch selects on a label: taking it off a running pod makes the
 * API server send DELETED, and a relist no longer lists it. Neither frees
 * its GPUs in the ledger, which binds decide on: they stay held there until
 * a fresh read of the pod (here it fails: no API server answers) says it is
 * gone. The cache (what filters read) frees them on the hint, so that a pod
 * waiting for them is placed when the pod was really deleted, and shows
 * them held again once the read cannot confirm it.
 */
static void test_deleted_is_a_hint(void **state)
{
	(void)state;
	struct reaper_rig g;
	rig_up(&g);
	struct reserve *r = g.r;
	struct cache *c = g.c;
	assert_int_equal(watched(r, c, false, "5", 2), 2);
	pod_event(r, false, "u1");
	pod_event(r, false, "u2");
	/* u1's label goes: DELETED. */
	pod_event(r, true, "u1");
	assert_false(cached(c, "u1"));
	assert_false(remembered_gone(r, "u1"));
	/* u2 missing from a relist. */
	struct reflector_sink sink;
	reserve_pod_sink(r, &sink);
	sink.lock(sink.ctx);
	sink.list_begin(sink.ctx);
	sink.list_end(sink.ctx);
	sink.unlock(sink.ctx);
	assert_false(cached(c, "u2"));
	/* The reaper reads both pods before anything goes; the reads fail, so both stay, held in the cache again. */
	struct reap_stats st = pass(r);
	assert_int_equal(st.releases, 0);
	assert_int_equal(st.lookups, 2);
	assert_true(cached(c, "u1"));
	assert_true(cached(c, "u2"));
	/* A bind deciding on n1's ledger finds their GPUs taken. */
	struct gpu_node *devices = tu_node("n1", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	struct ledger l;
	assert_true(reserve_known_ledger(r, "n1", &l));
	struct gpu_node *n = reserve_node_in_ledger(r, devices, &l);
	assert_true(n->dev[0].exclusive && n->dev[1].exclusive);
	gpu_node_free(n);
	ledger_release(&l);
	gpu_node_free(devices);
	rig_down(&g);
}

/* u3, unbound, asking for a GPU, as the pod watch shows it. */
static void unbound_pod(struct reserve *r, const char *uid)
{
	char text[512];
	snprintf(text, sizeof(text),
		 "{\"metadata\":{\"name\":\"pod-%s\",\"namespace\":\"ml\",\"uid\":\"%s\"},\"spec\":{"
		 "\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]},"
		 "\"status\":{\"phase\":\"Pending\"}}",
		 uid, uid);
	struct reflector_sink sink;
	reserve_pod_sink(r, &sink);
	feed(&sink, false, cJSON_Parse(text));
}

/*
 * A watched pod the watch still shows unbound, its reservation older than
 * the bind timeout: the watch may be silent or lagging, and the pod bound
 * meanwhile. The reaper reads the pod first (here the read fails: it
 * stays). The age counts on this replica's monotonic clock from when it
 * first saw the entry, not from the since another replica's clock wrote
 * (here years ago).
 */
static void test_unbound_late_is_read_first(void **state)
{
	(void)state;
	struct reaper_rig g;
	rig_up(&g);
	struct reserve *r = g.r;
	struct cache *c = g.c;
	clock_virtual_set(1000000000000LL, 1800000000);
	assert_int_equal(watched(r, c, false, "5", 3), 3);   /* since 1700000000 */
	pod_event(r, false, "u1");   /* bound there */
	pod_event(r, false, "u2");
	unbound_pod(r, "u3");
	struct reap_stats st = pass(r);
	assert_int_equal(st.releases, 0);
	assert_int_equal(st.lookups, 0);    /* first seen now: not late */
	clock_virtual_set(1000000000000LL + 59LL * 1000000000, 1800000059);
	st = pass(r);
	assert_int_equal(st.releases + st.lookups, 0);
	clock_virtual_set(1000000000000LL + 61LL * 1000000000, 1800000061);
	st = pass(r);
	assert_int_equal(st.releases, 0);
	assert_int_equal(st.lookups, 1);
	assert_true(cached(c, "u3"));
	clock_real();
	rig_down(&g);
}

/* A bind of pod u9 (4 whole GPUs) on n1, one try of it with its token. */
struct try_rig {
	struct claim claim;
	struct bind_request req;
	struct gpu_node *devices;
};

static void try_rig_up(struct try_rig *t)
{
	memset(t, 0, sizeof(*t));
	t->claim.mode = CLAIM_EXCLUSIVE;
	t->claim.count = 4;
	t->claim.policy = -1;
	t->req = (struct bind_request){ .ns = "ml", .name = "pod-u9", .uid = "u9", .node = "n1", .claim = &t->claim };
	t->req.policy.id = POLICY_BINPACK;
	t->devices = tu_node("n1", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
}

static struct bind_ctx try_of(struct reserve *r, struct try_rig *t)
{
	return (struct bind_ctx){ .r = r, .req = &t->req, .node = t->devices, .token = reserve_new_token(r) };
}

/* Removes u9's entry from l at version id, as a failed try's release does; what became of it. */
static int release_try(struct ledger *l, struct resv_id id)
{
	const char *uid = "u9";
	unsigned char what[1] = { 0 };
	char ns[1][64];
	struct remove_ctx rc = { &uid, &id, what, ns, 1, false };
	char err[256];
	reserve_edit_remove(&rc, l, err, sizeof(err));
	return what[0];
}

/*
 * Two tries of one bind within one second (kube-scheduler binds again
 * after its httpTimeout while the first waits) share one ledger write: try
 * 1 reserves, try 2 finds the reservation and takes it over. Try 1's
 * binding is then refused (a 429): its release must leave the entry try 2
 * binds on. since alone cannot tell them apart (same second); the token can.
 */
static void test_release_spares_another_try(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct reserve_opts o = { .cache = c, .ns = "gpu-system", .identity = "r1" };
	struct reserve *r = reserve_new(&o);
	struct try_rig t;
	try_rig_up(&t);
	clock_virtual_set(1000000000000LL, 1800000000);   /* both tries in one second */
	struct ledger l;
	ledger_init(&l, "n1");
	char err[256];
	struct bind_ctx one = try_of(r, &t), two = try_of(r, &t);
	assert_int_not_equal(one.token, two.token);
	assert_int_equal(reserve_edit_reserve(&one, &l, err, sizeof(err)), LEDGER_WRITE);
	assert_false(one.existed);
	assert_int_equal(reserve_edit_reserve(&two, &l, err, sizeof(err)), LEDGER_WRITE);
	assert_true(two.existed);
	assert_int_equal(l.n, 1);
	/* Try 1 failed: its release keeps what try 2 relies on. */
	assert_int_equal(release_try(&l, resv_id_of(&one.entry.a)), RESV_KEPT);
	assert_int_equal(l.n, 1);
	/* A release at try 2's version does remove it. */
	assert_int_equal(release_try(&l, resv_id_of(&two.entry.a)), RESV_REMOVED);
	assert_int_equal(l.n, 0);
	clock_real();
	ledger_release(&l);
	gpu_node_free(t.devices);
	reserve_free(r);
	cache_free(c);
}

/* An API server of one ledger, n1's: a GET answers it, a PUT replaces it; anything else is a 404. */
struct one_ledger {
	struct buf lease;       /* the ledger as stored; empty: none */
	int puts, posts;
};

/* Stores body as the ledger, at a new resourceVersion (the count of writes). */
static void one_ledger_store(struct one_ledger *s, const char *body)
{
	cJSON *obj = cJSON_Parse(body);
	cJSON *meta = cJSON_GetObjectItem(obj, "metadata");
	char rv[16];
	snprintf(rv, sizeof(rv), "%d", 100 + s->puts + s->posts);
	cJSON_DeleteItemFromObject(meta, "resourceVersion");
	cJSON_AddStringToObject(meta, "resourceVersion", rv);
	char *text = cJSON_PrintUnformatted(obj);
	buf_clear(&s->lease);
	buf_adds(&s->lease, text);
	free(text);
	cJSON_Delete(obj);
}

/* The stored ledger's resourceVersion. */
static void one_ledger_version(struct one_ledger *s, char *out, size_t size)
{
	cJSON *obj = cJSON_Parse(buf_cstr(&s->lease));
	const char *rv = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(obj, "metadata"), "resourceVersion"));
	snprintf(out, size, "%s", rv ? rv : "");
	cJSON_Delete(obj);
}

/* Serves the ledger of n1 (GET, PUT, and POST when there is none) and 404 for anything else. */
static int one_ledger_transport(void *ctx, const char *method, const char *path, const char *body,
				const char *content_type, long timeout_s, struct kube_response *r, char *err,
				size_t errlen)
{
	(void)content_type;
	(void)timeout_s;
	(void)err;
	(void)errlen;
	struct one_ledger *s = ctx;
	bool stored = s->lease.len > 0;
	buf_clear(&r->body);
	r->status = 404;
	size_t plen = strlen(path);
	if (!strcmp(method, "POST") && plen > 7 && !strcmp(path + plen - 7, "/leases")) {
		r->status = stored ? 409 : 201;
		if (!stored) {
			s->posts++;
			one_ledger_store(s, body);
		}
	} else if (stored && strstr(path, "/leases/gpu-ledger.n1") && (!strcmp(method, "GET") || !strcmp(method, "PUT"))) {
		if (!strcmp(method, "PUT")) {
			s->puts++;
			one_ledger_store(s, body);
		}
		r->status = 200;
	}
	buf_adds(&r->body, r->status == 409   ? "{\"kind\":\"Status\",\"code\":409,\"reason\":\"AlreadyExists\"}"
			   : r->status == 404 ? "{\"kind\":\"Status\",\"code\":404,\"reason\":\"NotFound\"}"
					      : buf_cstr(&s->lease));
	return 0;
}

/* A reservation module whose API server is one_ledger_transport. */
struct one_rig {
	struct one_ledger s;
	struct kube_client *client;
	struct cache *c;
	struct reserve *r;
};

static void one_rig_up(struct one_rig *g)
{
	memset(g, 0, sizeof(*g));
	buf_init(&g->s.lease, 1 << 16);
	g->client = kube_client_new_transport(one_ledger_transport, &g->s);
	g->c = cache_new();
	struct reserve_opts o = { .client = g->client, .cache = g->c, .ns = "gpu-system", .identity = "r1" };
	g->r = reserve_new(&o);
}

static void one_rig_down(struct one_rig *g)
{
	reserve_free(g->r);
	cache_free(g->c);
	kube_client_free(g->client);
	buf_release(&g->s.lease);
}

/*
 * A release reports what became of each entry, so that only one it removed
 * is logged, counted and told to the pod as released: an entry another try
 * took over since the caller looked stays (and nothing is written), one at
 * the caller's version goes, and one not there is neither.
 */
static void test_release_reports_what_it_removed(void **state)
{
	(void)state;
	struct one_rig g;
	one_rig_up(&g);
	struct reserve *r = g.r;
	struct try_rig t;
	try_rig_up(&t);
	clock_virtual_set(1000000000000LL, 1800000000);
	struct ledger l;
	ledger_init(&l, "n1");
	char err[256];
	struct bind_ctx one = try_of(r, &t), two = try_of(r, &t);
	assert_int_equal(reserve_edit_reserve(&one, &l, err, sizeof(err)), LEDGER_WRITE);
	assert_int_equal(reserve_edit_reserve(&two, &l, err, sizeof(err)), LEDGER_WRITE);   /* try 2's version now */
	struct buf lease;
	buf_init(&lease, 1 << 16);
	assert_int_equal(ledger_encode(&l, "gpu-system", "r1", &lease), 0);
	cJSON *stored = cJSON_Parse(buf_cstr(&lease));     /* as stored: with a version */
	cJSON_AddStringToObject(cJSON_GetObjectItem(stored, "metadata"), "resourceVersion", "7");
	char *text = cJSON_PrintUnformatted(stored);
	buf_adds(&g.s.lease, text);
	free(text);
	cJSON_Delete(stored);
	buf_release(&lease);
	const char *uid = "u9", *absent = "u-none";
	struct resv_id was = resv_id_of(&one.entry.a), now = resv_id_of(&two.entry.a);
	unsigned char what = 0;
	assert_int_equal(reserve_release(r, "n1", &uid, &was, 1, &what, err, sizeof(err)), 0);
	assert_int_equal(what, RESV_KEPT);
	assert_int_equal(g.s.puts, 0);
	assert_int_equal(reserve_release(r, "n1", &absent, NULL, 1, &what, err, sizeof(err)), 0);
	assert_int_equal(what, 0);
	assert_int_equal(g.s.puts, 0);
	assert_int_equal(reserve_release(r, "n1", &uid, &now, 1, &what, err, sizeof(err)), 0);
	assert_int_equal(what, RESV_REMOVED);
	assert_int_equal(g.s.puts, 1);
	assert_null(strstr(buf_cstr(&g.s.lease), "\"u9\""));
	clock_real();
	ledger_release(&l);
	gpu_node_free(t.devices);
	one_rig_down(&g);
}

/*
 * Taking a gang's places back writes the node's ledger even when none of
 * them is there: a write of those places whose answer was lost, carried
 * out after the take-back, must then fail on the ledger's version or on
 * its existence (DST seed 8556: a create carried out after the plan was
 * rolled back left places no plan knew). A release of another pod writes
 * nothing when its entry is not there.
 */
static void test_take_back_fences_late_place_writes(void **state)
{
	(void)state;
	struct one_rig g;
	one_rig_up(&g);
	struct reserve *r = g.r;
	char err[256], place[64];
	ledger_place_uid("0123456789abcdef", "0badcafe", 0, place, sizeof(place));
	const char *uid = place;
	unsigned char what = 9;
	assert_int_equal(reserve_release(r, "n1", &uid, NULL, 1, &what, err, sizeof(err)), 0);
	assert_int_equal(what, 0);
	assert_int_equal(g.s.posts + g.s.puts, 0);
	/* No ledger yet: the take-back makes it, empty, so that a late create of the places fails. */
	assert_int_equal(reserve_take_back(r, "n1", &uid, 1, err, sizeof(err)), 0);
	assert_int_equal(g.s.posts, 1);
	assert_null(strstr(buf_cstr(&g.s.lease), place));
	char before[32], after[32];
	one_ledger_version(&g.s, before, sizeof(before));
	/* A ledger without the places: written all the same, so a late update's version is stale. */
	assert_int_equal(reserve_take_back(r, "n1", &uid, 1, err, sizeof(err)), 0);
	assert_int_equal(g.s.puts, 1);
	assert_null(strstr(buf_cstr(&g.s.lease), place));
	one_ledger_version(&g.s, after, sizeof(after));
	assert_string_not_equal(before, after);
	one_rig_down(&g);
}

/*
 * An edit decided again on a new ledger version (a 409) forgets what it
 * decided on the last one: a try that found the pod's entry in the watched
 * copy, then none in the fresh one, made the reservation itself and must
 * release it when its binding fails (existed false), not leave it to the
 * bind timeout.
 */
static void test_edit_decided_again_forgets(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct reserve_opts o = { .cache = c, .ns = "gpu-system", .identity = "r1" };
	struct reserve *r = reserve_new(&o);
	struct try_rig t;
	try_rig_up(&t);
	struct ledger stale, fresh;
	ledger_init(&stale, "n1");
	ledger_init(&fresh, "n1");
	struct ledger_entry old = entry("u9", CLAIM_EXCLUSIVE, 0, 4);
	assert_int_equal(ledger_add(&stale, &old), 0);
	char err[256];
	struct bind_ctx b = try_of(r, &t);
	assert_int_equal(reserve_edit_reserve(&b, &stale, err, sizeof(err)), LEDGER_WRITE);
	assert_true(b.existed);
	assert_int_equal(reserve_edit_reserve(&b, &fresh, err, sizeof(err)), LEDGER_WRITE);
	assert_false(b.existed);
	assert_false(b.took_place);
	assert_int_equal(fresh.n, 1);
	assert_int_equal(b.entry.a.token, b.token);
	ledger_release(&stale);
	ledger_release(&fresh);
	gpu_node_free(t.devices);
	reserve_free(r);
	cache_free(c);
}

/*
 * A retried bind that found the pod bound already, with other devices than
 * it reserved (an earlier try's, whose entry was lost): one edit makes its
 * entry hold the pod's devices; at no version are those free. Only this
 * try's version is rewritten; devices another entry holds are never taken
 * (both stay held).
 */
static void test_adopt_the_bound_devices(void **state)
{
	(void)state;
	struct cache *c = cache_new();
	struct reserve_opts o = { .cache = c, .ns = "gpu-system", .identity = "r1" };
	struct reserve *r = reserve_new(&o);
	struct gpu_node *devices = tu_node("n1", 8, GPU_VENDOR_NVIDIA, "H100", 81559);
	struct ledger l;
	ledger_init(&l, "n1");
	struct ledger_entry mine = entry("u9", CLAIM_EXCLUSIVE, 4, 2), other = entry("u2", CLAIM_EXCLUSIVE, 2, 1);
	mine.a.token = 7;
	assert_int_equal(ledger_add(&l, &mine), 0);
	assert_int_equal(ledger_add(&l, &other), 0);
	struct resv_id id = resv_id_of(&mine.a), stale = { mine.a.since, 6 };
	struct adopt_ctx ac = { .r = r, .uid = "u9", .only_id = &stale, .token = 8, .devices = devices };
	char err[256], ids[64];
	assert_int_equal(reserve_parse_allocated("n1:0,1", "n1", &ac.want), 0);
	assert_int_equal(reserve_parse_allocated("n2:0,1", "n1", &ac.want), -1);
	assert_int_equal(reserve_parse_allocated("n1:0,1", "n1", &ac.want), 0);
	/* Another version of the entry: left alone. */
	assert_int_equal(reserve_edit_adopt(&ac, &l, err, sizeof(err)), LEDGER_UNCHANGED);
	ac.only_id = &id;
	assert_int_equal(reserve_edit_adopt(&ac, &l, err, sizeof(err)), LEDGER_WRITE);
	int i = ledger_find(&l, "u9");
	assert_true(i >= 0);
	assert_int_equal(l.n, 2);
	alloc_ids(&l.e[i].a, ids, sizeof(ids));
	assert_string_equal(ids, "0,1");
	assert_int_equal(l.e[i].a.token, 8);
	assert_int_equal(ac.now.token, 8);
	/* Already so: nothing to write. */
	ac.only_id = NULL;
	assert_int_equal(reserve_edit_adopt(&ac, &l, err, sizeof(err)), LEDGER_UNCHANGED);
	assert_false(ac.clash);
	/* The pod's devices held by another entry: a clash, and both stay as they are. */
	assert_int_equal(reserve_parse_allocated("n1:1,2", "n1", &ac.want), 0);
	assert_int_equal(reserve_edit_adopt(&ac, &l, err, sizeof(err)), LEDGER_UNCHANGED);
	assert_true(ac.clash);
	alloc_ids(&l.e[ledger_find(&l, "u9")].a, ids, sizeof(ids));
	assert_string_equal(ids, "0,1");
	assert_true(ledger_find(&l, "u2") >= 0);
	/* No entry of the pod (released, or lost): nothing written. */
	ac.uid = "u5";
	assert_int_equal(reserve_edit_adopt(&ac, &l, err, sizeof(err)), LEDGER_UNCHANGED);
	ledger_release(&l);
	gpu_node_free(devices);
	reserve_free(r);
	cache_free(c);
}

/*
 * Feeds the pod watch pod-<uid> with spec.nodeName node ("": unbound) and
 * allocation annotation ann, of format version (NULL: no version key).
 */
static void watch_pod_on(struct reserve *r, const char *uid, const char *node, const char *ann, const char *version)
{
	char text[768], spec_node[96] = "", ver[96] = "";
	if (node[0])
		snprintf(spec_node, sizeof(spec_node), "\"nodeName\":\"%s\",", node);
	if (version)
		snprintf(ver, sizeof(ver), "\"gpu.scheduling/allocation-version\":\"%s\",", version);
	snprintf(text, sizeof(text),
		 "{\"metadata\":{\"name\":\"pod-%s\",\"namespace\":\"ml\",\"uid\":\"%s\",\"labels\":"
		 "{\"gpu.scheduling/managed\":\"true\"},\"annotations\":{%s\"gpu.scheduling/allocated\":\"%s\"}},"
		 "\"spec\":{%s\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
		 "{\"gpu.scheduling/gpu\":\"1\"}}}]},\"status\":{\"phase\":\"Running\"}}",
		 uid, uid, ver, ann, spec_node);
	struct reflector_sink sink;
	reserve_pod_sink(r, &sink);
	feed(&sink, false, cJSON_Parse(text));
}

/* The pod watch's record of pod-<uid>, bound to n1 with allocation "n1:3" of format version (NULL: none). */
static const char *watched_allocation(struct reserve *r, const char *uid, const char *version, char *out, size_t size)
{
	watch_pod_on(r, uid, "n1", "n1:3", version);
	pthread_mutex_lock(&r->lock);
	const struct pod_state *p = keyset_get(&r->pods, uid);
	if (p)
		pod_allocated(p, out, size);
	else
		snprintf(out, size, "(none)");
	pthread_mutex_unlock(&r->lock);
	return out;
}

/* A reservation module of its own on a new cache (*c), with the default resources (*res). */
static struct reserve *replica_on_new_cache(struct cache **c, struct api_resources *res)
{
	*c = cache_new();
	api_resources_default(res);
	struct reserve_opts o = { .cache = *c, .res = res, .ns = "gpu-system", .identity = "r1" };
	return reserve_new(&o);
}

/*
 * The reaper puts back or rewrites an entry from the pod's allocation as
 * the pod watch recorded it: 0.2.0's pods (no version) and this version's
 * are recorded; an allocation of a newer format is not, so no entry is
 * ever made or changed from what this version cannot read.
 */
static void test_watch_reads_allocation_versions(void **state)
{
	(void)state;
	struct cache *c;
	struct api_resources res;
	struct reserve *r = replica_on_new_cache(&c, &res);
	char got[64];
	assert_string_equal(watched_allocation(r, "u1", NULL, got, sizeof(got)), "n1:3");
	assert_string_equal(watched_allocation(r, "u2", "1", got, sizeof(got)), "n1:3");
	assert_string_equal(watched_allocation(r, "u3", "2", got, sizeof(got)), "");
	reserve_free(r);
	cache_free(c);
}

/*
 * A pod's record keeps its allocation annotation without the node's name
 * when that is the pod's own node (a second copy of it a pod), and gives
 * back the annotation whole; an annotation naming another node, or a pod
 * not bound, is kept as it is. The other strings are read back intact.
 */
static void test_pod_record_annotation_without_its_node(void **state)
{
	(void)state;
	struct cache *c;
	struct api_resources res;
	struct reserve *r = replica_on_new_cache(&c, &res);
	watch_pod_on(r, "u1", "node-a", "node-a:0,3", NULL);
	watch_pod_on(r, "u2", "node-a", "node-b:1", NULL);
	watch_pod_on(r, "u3", "", "node-a:2", NULL);
	watch_pod_on(r, "u4", "node-a", "node-a:", NULL);
	watch_pod_on(r, "u5", "node-a", "node-ab:4", NULL);
	char got[96];
	pthread_mutex_lock(&r->lock);
	const struct pod_state *p = keyset_get(&r->pods, "u1");
	assert_non_null(p);
	assert_true(p->ids_only);
	assert_string_equal(pod_str(p, POD_ALLOCATED), "0,3");
	assert_string_equal(pod_alloc_ids(p, "node-a"), "0,3");
	assert_null(pod_alloc_ids(p, "node-b"));
	pod_allocated(p, got, sizeof(got));
	assert_string_equal(got, "node-a:0,3");
	assert_string_equal(pod_str(p, POD_UID), "u1");
	assert_string_equal(pod_str(p, POD_NS), "ml");
	assert_string_equal(pod_str(p, POD_NAME), "pod-u1");
	assert_string_equal(pod_str(p, POD_NODE), "node-a");
	assert_string_equal(pod_str(p, POD_GANG), "");
	/* The others, kept whole: their ids under the node they name, none under another. */
	static const struct {
		const char *uid, *names, *ids, *other, *whole;
		bool ids_only;
	} kept[] = {
		{ "u2", "node-b", "1", "node-a", "node-b:1", false },     /* another node */
		{ "u3", "node-a", "2", "node-b", "node-a:2", false },     /* not bound */
		{ "u4", "node-a", "", "node-b", "node-a:", true },        /* its own node, no ids */
		{ "u5", "node-ab", "4", "node-a", "node-ab:4", false },   /* a name its node's is a prefix of */
	};
	for (size_t k = 0; k < sizeof(kept) / sizeof(kept[0]); k++) {
		p = keyset_get(&r->pods, kept[k].uid);
		assert_non_null(p);
		assert_int_equal(p->ids_only, kept[k].ids_only);
		assert_string_equal(pod_alloc_ids(p, kept[k].names), kept[k].ids);
		assert_null(pod_alloc_ids(p, kept[k].other));
		pod_allocated(p, got, sizeof(got));
		assert_string_equal(got, kept[k].whole);
	}
	assert_string_equal(pod_str(keyset_get(&r->pods, "u3"), POD_NODE), "");
	pthread_mutex_unlock(&r->lock);
	reserve_free(r);
	cache_free(c);
}

/*
 * A pod asking for GPUs that the pod watch loses sight of (its managed label
 * went, or it was deleted) is noted for the reaper, which reads it and gives
 * one alive and bound a reservation Lease; seen again, it is not.
 */
static void test_lost_sight_is_noted(void **state)
{
	(void)state;
	struct reaper_rig g;
	rig_up(&g);
	struct reserve *r = g.r;
	pod_event(r, false, "u1");
	pod_event(r, false, "u2");
	pod_event(r, true, "u1");
	pod_event(r, true, "u2");
	pod_event(r, false, "u2");     /* its label back */
	pthread_mutex_lock(&r->lock);
	const struct unwatched_pod *u = strmap_get(&r->unwatched, "u1");
	assert_non_null(u);
	assert_string_equal(u->ns, "ml");
	assert_string_equal(u->pod, "pod-u1");
	assert_null(strmap_get(&r->unwatched, "u2"));
	pthread_mutex_unlock(&r->lock);
	/* The read fails (no API server): noted until one answers. */
	pass(r);
	pthread_mutex_lock(&r->lock);
	assert_non_null(strmap_get(&r->unwatched, "u1"));
	pthread_mutex_unlock(&r->lock);
	rig_down(&g);
}

/* The try token survives the ledger's JSON, and a ledger without one (an older replica's) reads as 0. */
static void test_token_roundtrip(void **state)
{
	(void)state;
	struct ledger l, back;
	ledger_init(&l, "n1");
	struct ledger_entry e = entry("u1", CLAIM_EXCLUSIVE, 0, 1), f = entry("u2", CLAIM_EXCLUSIVE, 1, 1);
	e.a.token = 4000000000u;
	assert_int_equal(ledger_add(&l, &e), 0);
	assert_int_equal(ledger_add(&l, &f), 0);
	struct buf out;
	buf_init(&out, 1 << 20);
	assert_int_equal(ledger_encode(&l, "gpu-system", "r1", &out), 0);
	assert_non_null(strstr(buf_cstr(&out), "\\\"try\\\":4000000000"));
	cJSON *obj = cJSON_Parse(buf_cstr(&out));
	char err[256];
	assert_int_equal(ledger_decode(obj, &back, err, sizeof(err)), 0);
	assert_int_equal(back.e[0].a.token, 4000000000u);
	assert_int_equal(back.e[1].a.token, 0);
	struct ledger_packed p;
	assert_int_equal(ledger_pack(&back, &p), 0);
	struct ledger_entry x;
	size_t pos = 0;
	assert_true(ledger_packed_next(&p, &pos, &x));
	assert_int_equal(x.a.token, 4000000000u);
	ledger_packed_release(&p);
	cJSON_Delete(obj);
	buf_release(&out);
	ledger_release(&back);
	ledger_release(&l);
}

/* A gang's plan as its lock Lease records it, and the plan its places' uids name. */
static void test_gang_intent_and_place_uids(void **state)
{
	(void)state;
	char nodes[2][254] = { "gh1", "gh\"2" };
	struct gang_intent in = { .plan = "0a1b2c3d", .total = 3, .state = PLAN_WRITING, .nnodes = 2, .nodes = nodes };
	struct buf b;
	buf_init(&b, 4096);
	assert_int_equal(ledger_intent_encode(&in, &b), 0);
	assert_string_equal(buf_cstr(&b), "{\"plan\":\"0a1b2c3d\",\"total\":3,\"state\":\"Writing\",\"nodes\":[\"gh1\",\"gh\\\"2\"]}");
	struct gang_intent out;
	char err[256];
	assert_int_equal(ledger_intent_decode(buf_cstr(&b), &out, err, sizeof(err)), 0);
	assert_string_equal(out.plan, "0a1b2c3d");
	assert_int_equal(out.total, 3);
	assert_int_equal(out.state, PLAN_WRITING);
	assert_int_equal(out.nnodes, 2);
	assert_string_equal(out.nodes[1], "gh\"2");
	ledger_intent_release(&out);
	buf_release(&b);
	/* Bad ones are refused whole, with what is wanted. */
	const char *bad[] = { NULL, "", "[]", "{\"plan\":\"xyz\",\"total\":1,\"state\":\"Writing\",\"nodes\":[]}",
			      "{\"plan\":\"0a1b2c3d\",\"total\":0,\"state\":\"Writing\",\"nodes\":[]}",
			      "{\"plan\":\"0a1b2c3d\",\"total\":1,\"state\":\"Done\",\"nodes\":[]}",
			      "{\"plan\":\"0a1b2c3d\",\"total\":1,\"state\":\"Written\",\"nodes\":[7]}" };
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		assert_int_equal(ledger_intent_decode(bad[k], &out, err, sizeof(err)), -1);
		assert_null(out.nodes);
		assert_non_null(strstr(err, GANG_PLAN_ANN));
	}
	/* Place uids: the plan's, and none in those from before plans. */
	char id[17], uid[64], plan[9];
	ledger_gang_id("ml", "job-7", id);
	ledger_place_uid(id, "0a1b2c3d", 12, uid, sizeof(uid));
	assert_true(ledger_uid_is_place(uid));
	assert_true(ledger_place_plan(uid, plan));
	assert_string_equal(plan, "0a1b2c3d");
	char old[64];
	snprintf(old, sizeof(old), "gang-%s-12345678", id);
	assert_false(ledger_place_plan(old, plan));
	snprintf(old, sizeof(old), "gang-%s-r0a1b2c3d", id);
	assert_false(ledger_place_plan(old, plan));
	assert_false(ledger_place_plan("0a1b2c3d-pod-uid", plan));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_decode_errors),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_reservation_lease),
		cmocka_unit_test(test_format_versions),
		cmocka_unit_test(test_kubeconfig),
		cmocka_unit_test(test_pack_roundtrip),
		cmocka_unit_test(test_watch_never_goes_back),
		cmocka_unit_test(test_ledger_shared_with_the_cache),
		cmocka_unit_test(test_gone_forgotten_once_released),
		cmocka_unit_test(test_reaper_marks_held_pods),
		cmocka_unit_test(test_reaper_walks_in_slices),
		cmocka_unit_test(test_deleted_is_a_hint),
		cmocka_unit_test(test_unbound_late_is_read_first),
		cmocka_unit_test(test_release_spares_another_try),
		cmocka_unit_test(test_release_reports_what_it_removed),
		cmocka_unit_test(test_take_back_fences_late_place_writes),
		cmocka_unit_test(test_edit_decided_again_forgets),
		cmocka_unit_test(test_adopt_the_bound_devices),
		cmocka_unit_test(test_watch_reads_allocation_versions),
		cmocka_unit_test(test_pod_record_annotation_without_its_node),
		cmocka_unit_test(test_lost_sight_is_noted),
		cmocka_unit_test(test_token_roundtrip),
		cmocka_unit_test(test_gang_intent_and_place_uids),
	};
	return cmocka_run_group_tests_name("ledger", tests, NULL, NULL);
}
