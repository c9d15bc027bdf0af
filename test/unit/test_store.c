/*
 * The reservation storage's contract (src/reserve/store.h) as the API
 * server's Leases keep it: what each answer of the API server comes to.
 * A new storage for reservations keeps the same promises.
 */
#include "testutil.h"

#include "store.h"
#include "buf.h"
#include "kube.h"
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>

/* A scripted API server: the answers in order, and the requests it was sent. */
struct script {
	struct { long status; const char *body; } answer[8];
	int n, at;
	char method[8][8];
	char path[8][512];
};

static int scripted(void *ctx, const char *method, const char *path, const char *body, const char *content_type,
		    long timeout_s, struct kube_response *r, char *err, size_t errlen)
{
	(void)body;
	(void)content_type;
	(void)timeout_s;
	struct script *s = ctx;
	if (s->at >= s->n) {
		snprintf(err, errlen, "no answer scripted");
		return -1;
	}
	snprintf(s->method[s->at], sizeof(s->method[0]), "%s", method);
	snprintf(s->path[s->at], sizeof(s->path[0]), "%s", path);
	r->status = s->answer[s->at].status;
	if (r->status == 0) {     /* the connection went: no answer */
		s->at++;
		snprintf(err, errlen, "connection reset");
		return -1;
	}
	buf_adds(&r->body, s->answer[s->at].body ? s->answer[s->at].body : "{}");
	s->at++;
	return 0;
}

static struct kube_client *client_of(struct script *s, struct store *st)
{
	struct kube_client *c = kube_client_new_transport(scripted, s);
	assert_non_null(c);
	*st = (struct store){ .client = c, .ns = "gpu-system", .identity = "replica-1" };
	return c;
}

/* A ledger Lease of node n1 at version rv, holding one entry of pod u1. */
static char *ledger_text(const char *rv)
{
	struct ledger l;
	ledger_init(&l, "n1");
	snprintf(l.rv, sizeof(l.rv), "%s", rv);
	struct ledger_entry e;
	memset(&e, 0, sizeof(e));
	snprintf(e.a.uid, sizeof(e.a.uid), "u1");
	alloc_add_id(&e.a, 3);
	e.a.since = 1700000000;
	ledger_entry_set_pod(&e, "ml", "pod-u1");
	assert_int_equal(ledger_add(&l, &e), 0);
	struct buf out;
	buf_init(&out, 4096);
	assert_int_equal(ledger_encode(&l, "gpu-system", "replica-1", &out), 0);
	ledger_release(&l);
	char *text = strdup(buf_cstr(&out));
	buf_release(&out);
	return text;
}

/* A read of a ledger there is none of is an empty one (a write then makes it); a refusal is an error. */
static void test_ledger_read(void **state)
{
	(void)state;
	char *text = ledger_text("41");
	struct script s = { .answer = { { 404, NULL }, { 200, text }, { 403, "{\"message\":\"forbidden\"}" } }, .n = 3 };
	struct store st;
	struct kube_client *c = client_of(&s, &st);
	struct ledger l;
	char err[256];
	assert_int_equal(store_ledger_read(&st, "n1", &l, err, sizeof(err)), STORE_OK);
	assert_int_equal(l.n, 0);
	assert_string_equal(l.rv, "");
	ledger_release(&l);
	assert_int_equal(store_ledger_read(&st, "n1", &l, err, sizeof(err)), STORE_OK);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.rv, "41");
	assert_string_equal(l.e[0].a.uid, "u1");
	ledger_release(&l);
	assert_int_equal(store_ledger_read(&st, "n1", &l, err, sizeof(err)), STORE_ERROR);
	assert_non_null(strstr(err, "403"));
	assert_string_equal(s.method[0], "GET");
	assert_non_null(strstr(s.path[0], "/namespaces/gpu-system/leases/gpu-ledger."));
	kube_client_free(c);
	free(text);
}

/*
 * A write at a version is a PUT; without one, a POST. Another version
 * stored (409), or the ledger deleted meanwhile (404 on a PUT), is a
 * conflict; anything else that is not a success is an error, and so is no
 * answer at all (the write may have gone through).
 */
static void test_ledger_write(void **state)
{
	(void)state;
	char *text = ledger_text("42");
	struct script s = { .answer = { { 200, text }, { 409, NULL }, { 404, NULL }, { 201, text }, { 404, NULL },
					{ 0, NULL }, { 200, "not json" } },
			    .n = 7 };
	struct store st;
	struct kube_client *c = client_of(&s, &st);
	struct ledger l, now;
	ledger_init(&l, "n1");
	snprintf(l.rv, sizeof(l.rv), "41");
	char err[256];
	assert_int_equal(store_ledger_write(&st, &l, &now, err, sizeof(err)), STORE_OK);
	assert_string_equal(now.rv, "42");
	assert_int_equal(now.n, 1);
	ledger_release(&now);
	assert_string_equal(s.method[0], "PUT");
	assert_int_equal(store_ledger_write(&st, &l, &now, err, sizeof(err)), STORE_CONFLICT);
	assert_int_equal(store_ledger_write(&st, &l, &now, err, sizeof(err)), STORE_CONFLICT);
	l.rv[0] = '\0';
	assert_int_equal(store_ledger_write(&st, &l, &now, err, sizeof(err)), STORE_OK);
	ledger_release(&now);
	assert_string_equal(s.method[3], "POST");
	assert_int_equal(store_ledger_write(&st, &l, &now, err, sizeof(err)), STORE_ERROR);   /* a POST's 404 */
	snprintf(l.rv, sizeof(l.rv), "41");
	assert_int_equal(store_ledger_write(&st, &l, &now, err, sizeof(err)), STORE_ERROR);   /* no answer */
	/* Written, its answer unreadable: the version stored is not known. */
	assert_int_equal(store_ledger_write(&st, &l, &now, err, sizeof(err)), STORE_OK);
	assert_string_equal(now.rv, "");
	ledger_release(&now);
	ledger_release(&l);
	kube_client_free(c);
	free(text);
}

/* A reservation Lease there already is renewed; one deleted before the renewal is made again. */
static void test_reservation_put_renews(void **state)
{
	(void)state;
	struct script s = { .answer = { { 409, NULL }, { 404, NULL }, { 201, "{}" }, { 409, NULL }, { 200, "{}" },
					{ 409, NULL }, { 500, "{\"message\":\"boom\"}" } },
			    .n = 7 };
	struct store st;
	struct kube_client *c = client_of(&s, &st);
	struct ledger_entry e;
	memset(&e, 0, sizeof(e));
	snprintf(e.a.uid, sizeof(e.a.uid), "u1");
	alloc_add_id(&e.a, 0);
	ledger_entry_set_pod(&e, "ml", "pod-u1");
	char err[256];
	assert_int_equal(store_resv_put(&st, &e, "n1", err, sizeof(err)), STORE_OK);
	assert_string_equal(s.method[0], "POST");
	assert_string_equal(s.method[1], "PATCH");
	assert_string_equal(s.method[2], "POST");
	assert_int_equal(store_resv_put(&st, &e, "n1", err, sizeof(err)), STORE_OK);
	assert_string_equal(s.method[4], "PATCH");
	assert_int_equal(store_resv_put(&st, &e, "n1", err, sizeof(err)), STORE_ERROR);
	assert_non_null(strstr(err, "500"));
	kube_client_free(c);
}

/* A reservation Lease is read with its uid and version, and deleted only at that version. */
static void test_reservation_read_delete(void **state)
{
	(void)state;
	struct script s = { .answer = { { 200, "{\"metadata\":{\"uid\":\"L1\",\"resourceVersion\":\"7\"}}" }, { 404, NULL },
					{ 200, "{}" }, { 409, NULL }, { 404, NULL }, { 0, NULL } },
			    .n = 6 };
	struct store st;
	struct kube_client *c = client_of(&s, &st);
	char uid[64], version[32], err[256];
	assert_int_equal(store_resv_read(&st, "ml", "u1", "n1", uid, sizeof(uid), version, sizeof(version), err,
					 sizeof(err)), STORE_OK);
	assert_string_equal(uid, "L1");
	assert_string_equal(version, "7");
	assert_int_equal(store_resv_read(&st, "ml", "u1", "n1", uid, sizeof(uid), version, sizeof(version), err,
					 sizeof(err)), STORE_NONE);
	assert_int_equal(store_resv_delete(&st, "ml", "u1", "n1", "L1", "7", err, sizeof(err)), STORE_OK);
	assert_string_equal(s.method[2], "DELETE");
	assert_non_null(strstr(s.path[2], "/namespaces/ml/leases/gpu-reservation."));
	assert_int_equal(store_resv_delete(&st, "ml", "u1", "n1", "L1", "7", err, sizeof(err)), STORE_CONFLICT);
	assert_int_equal(store_resv_delete(&st, "ml", "u1", "n1", "L1", "7", err, sizeof(err)), STORE_NONE);
	assert_int_equal(store_resv_delete(&st, "ml", "u1", "n1", "L1", "7", err, sizeof(err)), STORE_ERROR);
	kube_client_free(c);
}

/* text with its first "from" replaced by "to" (a new string) */
static char *replaced(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	assert_non_null(at);
	size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
	char *out = malloc(n);
	assert_non_null(out);
	snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	return out;
}

/*
 * A ledger of a newer format is not read (so no edit is made on it, and a
 * bind to its node fails with the reason); one without a version (0.2.0)
 * is read as before.
 */
static void test_ledger_versions(void **state)
{
	(void)state;
	char *text = ledger_text("41");
	char *newer = replaced(text, "\"gpu.scheduling/ledger-version\":\"1\"", "\"gpu.scheduling/ledger-version\":\"2\"");
	char *older = replaced(text, "\"gpu.scheduling/ledger-version\":\"1\",", "");
	struct script s = { .answer = { { 200, newer }, { 200, older } }, .n = 2 };
	struct store st;
	struct kube_client *c = client_of(&s, &st);
	struct ledger l;
	char err[256] = "";
	assert_int_equal(store_ledger_read(&st, "n1", &l, err, sizeof(err)), STORE_ERROR);
	assert_non_null(strstr(err, "ledger-version 2 is newer"));
	assert_int_equal(store_ledger_read(&st, "n1", &l, err, sizeof(err)), STORE_OK);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.e[0].a.uid, "u1");
	ledger_release(&l);
	kube_client_free(c);
	free(text);
	free(newer);
	free(older);
}

struct resv_seen {
	int puts;
	char node[64];
};
static void resv_noop(void *ctx)
{
	(void)ctx;
}
static void resv_put(void *ctx, const char *ns, const char *name, const char *uid, const char *pod, const char *node)
{
	(void)ns, (void)name, (void)uid, (void)pod;
	struct resv_seen *r = ctx;
	r->puts++;
	snprintf(r->node, sizeof(r->node), "%s", node);
}
static void resv_deleted(void *ctx, const char *ns, const char *name, const char *uid)
{
	(void)ctx, (void)ns, (void)name, (void)uid;
}

/* The reservations watch takes in 0.2.0's Leases and this version's, and leaves a newer one alone. */
static void test_reservation_versions(void **state)
{
	(void)state;
	struct resv_seen seen = { 0, "" };
	struct store_resv_events ev = { { &seen, resv_noop, resv_noop, resv_noop, resv_noop }, resv_put, resv_deleted };
	struct reflector_sink sink;
	store_resv_sink(&ev, &sink);
	struct ledger_entry e;
	memset(&e, 0, sizeof(e));
	snprintf(e.a.uid, sizeof(e.a.uid), "u1");
	alloc_add_id(&e.a, 0);
	ledger_entry_set_pod(&e, "ml", "pod-u1");
	struct buf b;
	buf_init(&b, 4096);
	assert_int_equal(ledger_encode_reservation(&e, "n1", &b), 0);
	char *older = replaced(buf_cstr(&b), "\"gpu.scheduling/ledger-version\":\"1\",", "");
	char *newer = replaced(buf_cstr(&b), "\"gpu.scheduling/ledger-version\":\"1\"", "\"gpu.scheduling/ledger-version\":\"3\"");
	const char *texts[] = { buf_cstr(&b), older, newer };
	for (int i = 0; i < 3; i++) {
		cJSON *obj = cJSON_Parse(texts[i]);
		assert_non_null(obj);
		sink.apply(sink.ctx, false, obj);
		cJSON_Delete(obj);
		assert_int_equal(seen.puts, i < 2 ? i + 1 : 2);
	}
	assert_string_equal(seen.node, "n1");
	free(older);
	free(newer);
	buf_release(&b);
}

#define LOCK_OBJ \
	"{\"metadata\":{\"name\":\"gpu-gang.abc\",\"resourceVersion\":\"%s\",\"annotations\":{\"gpu.scheduling/gang\":" \
	"\"ml/g\",\"gpu.scheduling/gang-plan\":\"%s\"}},\"spec\":{\"holderIdentity\":\"replica-2\"," \
	"\"leaseDurationSeconds\":60,\"renewTime\":\"2026-01-01T00:00:00.000000Z\"}}"

/* A gang's lock: taken once (a second take is a conflict), its plan's state written at its version. */
static void test_lock(void **state)
{
	(void)state;
	struct gang_intent in = { .plan = "0000abcd", .total = 2, .state = PLAN_WRITING, .nnodes = 0 };
	struct buf intent;
	buf_init(&intent, 1024);
	assert_int_equal(ledger_intent_encode(&in, &intent), 0);
	struct buf esc;
	buf_init(&esc, 1024);
	buf_add_json_str(&esc, buf_cstr(&intent));
	char plan[512], v1[2048], v2[2048];
	snprintf(plan, sizeof(plan), "%.*s", (int)esc.len - 2, buf_cstr(&esc) + 1);   /* without its quotes */
	snprintf(v1, sizeof(v1), LOCK_OBJ, "5", plan);
	snprintf(v2, sizeof(v2), LOCK_OBJ, "6", plan);
	char *v9 = replaced(v1, "\"annotations\":{", "\"annotations\":{\"gpu.scheduling/ledger-version\":\"9\",");
	struct script s = { .answer = { { 201, v1 }, { 409, NULL }, { 200, v2 }, { 409, NULL }, { 200, v1 }, { 200, v9 } },
			    .n = 6 };
	struct store st;
	struct kube_client *c = client_of(&s, &st);
	struct store_lock lock, other;
	char err[256];
	assert_int_equal(store_lock_create(&st, "ml", "g", "abc", 60, &in, &lock, err, sizeof(err)), STORE_OK);
	assert_string_equal(lock.id, "abc");
	assert_string_equal(lock.rv, "5");
	assert_string_equal(lock.gang, "ml/g");
	assert_string_equal(lock.holder, "replica-2");
	assert_int_equal(lock.duration_s, 60);
	assert_true(lock.planned);
	assert_string_equal(lock.in.plan, "0000abcd");
	assert_true(lock.end > 0);
	assert_int_equal(store_lock_create(&st, "ml", "g", "abc", 60, &in, &other, err, sizeof(err)), STORE_CONFLICT);
	store_lock_release(&other);
	assert_int_equal(store_lock_set_state(&st, &lock, PLAN_WRITTEN, err, sizeof(err)), STORE_OK);
	assert_string_equal(s.method[2], "PUT");
	assert_string_equal(lock.rv, "6");
	assert_int_equal(lock.in.state, PLAN_WRITTEN);
	assert_int_equal(store_lock_set_state(&st, &lock, PLAN_ROLLED_BACK, err, sizeof(err)), STORE_CONFLICT);
	store_lock_release(&lock);
	assert_int_equal(store_lock_read(&st, "abc", &lock, err, sizeof(err)), STORE_OK);
	assert_string_equal(lock.rv, "5");
	store_lock_release(&lock);
	/* a lock of a newer format: not read, so never taken back or deleted here */
	assert_int_equal(store_lock_read(&st, "abc", &lock, err, sizeof(err)), STORE_ERROR);
	assert_non_null(strstr(err, "unreadable"));
	store_lock_release(&lock);
	buf_release(&intent);
	buf_release(&esc);
	kube_client_free(c);
	free(v9);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ledger_read),
		cmocka_unit_test(test_ledger_write),
		cmocka_unit_test(test_reservation_put_renews),
		cmocka_unit_test(test_reservation_read_delete),
		cmocka_unit_test(test_lock),
		cmocka_unit_test(test_ledger_versions),
		cmocka_unit_test(test_reservation_versions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
