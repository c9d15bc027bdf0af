#include "clock.h"
#include "ledger.h"
#include "api.h"
#include "strnum.h"

#include <openssl/sha.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define STR_(x) #x
#define STR(x) STR_(x)

void ledger_init(struct ledger *l, const char *node)
{
	memset(l, 0, sizeof(*l));
	snprintf(l->node, sizeof(l->node), "%s", node);
}

void ledger_release(struct ledger *l)
{
	free(l->e);
	l->e = NULL;
	l->n = l->cap = 0;
}

int ledger_add(struct ledger *l, const struct ledger_entry *e)
{
	if (l->n == l->cap) {
		int cap = l->cap ? l->cap * 2 : 8;
		struct ledger_entry *ne = realloc(l->e, (size_t)cap * sizeof(*ne));
		if (!ne)
			return -1;
		l->e = ne;
		l->cap = cap;
	}
	l->e[l->n++] = *e;
	return 0;
}

int ledger_find(const struct ledger *l, const char *uid)
{
	for (int i = 0; i < l->n; i++)
		if (!strcmp(l->e[i].a.uid, uid))
			return i;
	return -1;
}

void ledger_remove_at(struct ledger *l, int i)
{
	l->e[i] = l->e[--l->n];
}

/* The first 8 bytes of SHA-256(s) in hex. */
static void short_hash(const char *s, char out[17])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	SHA256((const unsigned char *)s, strlen(s), md);
	for (int i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

void ledger_gang_id(const char *ns, const char *gang, char out[17])
{
	char key[256];
	snprintf(key, sizeof(key), "%s/%s", ns, gang);
	short_hash(key, out);
}

void ledger_lease_name(const char *node, char *out, size_t size)
{
	/* Node names are DNS subdomains, so the prefix keeps the name valid; a
	 * name that would pass 253 characters is cut and made unique by a hash. */
	if (strlen(node) + 11 <= 253) {
		snprintf(out, size, "gpu-ledger.%s", node);
		return;
	}
	char h[17];
	short_hash(node, h);
	snprintf(out, size, "gpu-ledger.%.200s-%s", node, h);
}

void ledger_reservation_name(const char *uid, const char *node, char *out, size_t size)
{
	char h[17];
	short_hash(node, h);
	snprintf(out, size, "gpu-reservation.%s.%s", uid, h);
}

void ledger_microtime(char *out, size_t size)
{
	/* The clock module's wall seconds (the simulator's virtual clock, else the real one);
	   the real microseconds only when they belong to that second */
	struct timeval tv;
	gettimeofday(&tv, NULL);
	time_t sec = (time_t)clock_wall_s();
	long us = tv.tv_sec == sec ? (long)tv.tv_usec : 0;
	struct tm tm;
	gmtime_r(&sec, &tm);
	char base[32];
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, size, "%s.%06ldZ", base, us);
}

/* ---- packed entries: the cache's records (cache.h), one block a ledger ---- */

static struct alloc_names entry_names(const struct ledger_entry *e)
{
	return (struct alloc_names){ e->ns, e->name, e->claim, e->gang };
}

int ledger_pack(const struct ledger *l, struct ledger_packed *out)
{
	memset(out, 0, sizeof(*out));
	if (!l->n)
		return 0;
	/* Kept for long, by every node: exactly its size. */
	size_t need = 0;
	for (int i = 0; i < l->n; i++) {
		struct alloc_names x = entry_names(&l->e[i]);
		need += alloc_rec_size(&l->e[i].a, &x);
	}
	struct alloc_block *b = alloc_block_new(need);
	if (!b)
		return -1;
	for (int i = 0; i < l->n; i++) {
		struct alloc_names x = entry_names(&l->e[i]);
		alloc_block_append(b, &l->e[i].a, &x, l->e[i].gang_timeout_s);
	}
	out->block = b;
	out->n = l->n;
	return 0;
}

void ledger_packed_release(struct ledger_packed *p)
{
	alloc_block_release(p->block);
	memset(p, 0, sizeof(*p));
}

/* The record at *pos, *pos moved past it; NULL at the end. */
static const struct alloc_rec *packed_at(const struct ledger_packed *p, size_t *pos)
{
	if (!p->block || *pos >= p->block->len)
		return NULL;
	const struct alloc_rec *r = (const struct alloc_rec *)((const char *)p->block->data + *pos);
	*pos += r->size;
	return r;
}

/* src into out, cut to size (the reaper unpacks every entry of every node each pass: no printf). */
static void copy_str(char *out, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);
	memcpy(out, src, n);
	out[n] = '\0';
}

bool ledger_packed_next(const struct ledger_packed *p, size_t *pos, struct ledger_entry *e)
{
	const struct alloc_rec *r = packed_at(p, pos);
	if (!r)
		return false;
	alloc_rec_unpack(r, &e->a);
	struct alloc_names x;
	alloc_rec_names(r, &x);
	copy_str(e->ns, sizeof(e->ns), x.ns);
	copy_str(e->name, sizeof(e->name), x.name);
	copy_str(e->claim, sizeof(e->claim), x.claim);
	copy_str(e->gang, sizeof(e->gang), x.gang);
	e->gang_timeout_s = r->gang_timeout_s;
	return true;
}

bool ledger_packed_next_strs(const struct ledger_packed *p, size_t *pos, struct ledger_packed_strs *out)
{
	const struct alloc_rec *r = packed_at(p, pos);
	if (!r)
		return false;
	struct alloc_names x;
	alloc_rec_names(r, &x);
	*out = (struct ledger_packed_strs){ alloc_rec_uid(r), x.ns, x.name, x.claim, x.gang };
	return true;
}

bool ledger_packed_holds(const struct ledger_packed *p, const char *uid)
{
	const struct alloc_rec *r;
	for (size_t pos = 0; (r = packed_at(p, &pos));)
		if (!strcmp(alloc_rec_uid(r), uid))
			return true;
	return false;
}

int ledger_unpack(const struct ledger_packed *p, const char *node, const char *rv, struct ledger *out)
{
	ledger_init(out, node);
	snprintf(out->rv, sizeof(out->rv), "%s", rv);
	struct ledger_entry e;
	for (size_t pos = 0; ledger_packed_next(p, &pos, &e);) {
		if (ledger_add(out, &e)) {
			ledger_release(out);
			return -1;
		}
	}
	return 0;
}

void ledger_entry_set_pod(struct ledger_entry *e, const char *ns, const char *name)
{
	snprintf(e->ns, sizeof(e->ns), "%s", ns);
	snprintf(e->name, sizeof(e->name), "%s", name);
	alloc_set_pod(&e->a, ns, name);
}

static int decode_entry(const cJSON *j, struct ledger_entry *e, char *err, size_t errlen)
{
	memset(e, 0, sizeof(*e));
	const char *uid = api_str(j, "uid"), *ns = api_str(j, "namespace"), *pod = api_str(j, "pod");
	const char *mode = api_str(j, "mode"), *claim = api_str(j, "claim"), *gang = api_str(j, "gang");
	const cJSON *devs = cJSON_GetObjectItemCaseSensitive(j, "devices");
	if (!uid || !ns || !pod || !cJSON_IsArray(devs) || cJSON_GetArraySize(devs) > GPU_MAX_DEVICES) {
		snprintf(err, errlen, "a reservation lacks uid, namespace, pod or devices");
		return -1;
	}
	snprintf(e->a.uid, sizeof(e->a.uid), "%s", uid);
	ledger_entry_set_pod(e, ns, pod);
	if (claim)
		snprintf(e->claim, sizeof(e->claim), "%s", claim);
	if (gang)
		snprintf(e->gang, sizeof(e->gang), "%s", gang);
	e->a.mode = mode && !strcmp(mode, "Shared") ? CLAIM_SHARED : mode && !strcmp(mode, "MIG") ? CLAIM_MIG
											    : CLAIM_EXCLUSIVE;
	const cJSON *d;
	double num;
	cJSON_ArrayForEach(d, devs) {
		if (!api_whole(d, 0, 1e6, &num)) {
			snprintf(err, errlen, "reservation %s: devices must be ids", uid);
			return -1;
		}
		if (alloc_add_id(&e->a, (int)num)) {
			snprintf(err, errlen, "reservation %s: device ids more than %d apart", uid, ALLOC_ID_SPAN);
			return -1;
		}
	}
	/* Optional numbers; one out of range makes the entry (and so the ledger) unreadable. */
	struct { const char *key; double hi; } nums[] = {
		{ "memoryMiB", 4294967295.0 }, { "coreMilli", 4294967295.0 }, { "since", 1e15 },
		{ "gangTimeoutSeconds", 86400 }, { "try", 4294967295.0 },
	};
	double val[5] = { 0, 0, 0, 0, 0 };
	for (int k = 0; k < 5; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, nums[k].key);
		if (v && !api_whole(v, 0, nums[k].hi, &val[k])) {
			snprintf(err, errlen, "reservation %s: %s must be a whole number from 0 to %.0f", uid,
				 nums[k].key, nums[k].hi);
			return -1;
		}
	}
	e->a.mem_mib = (uint32_t)val[0];
	e->a.core = (uint32_t)val[1];
	e->a.since = (int64_t)val[2];
	e->gang_timeout_s = (int)val[3];
	e->a.token = (uint32_t)val[4];
	return 0;
}

bool ledger_version_known(const cJSON *lease, char *err, size_t errlen)
{
	int version;
	return !api_format_version(lease, LEDGER_ANN_VERSION, LEDGER_VERSION, &version, err, errlen);
}

int ledger_decode(const cJSON *lease, struct ledger *l, char *err, size_t errlen)
{
	const char *node = api_annotation(lease, LEDGER_ANN_NODE);
	if (!node) {
		snprintf(err, errlen, "ledger Lease without the %s annotation", LEDGER_ANN_NODE);
		return -1;
	}
	char why[256];
	if (!ledger_version_known(lease, why, sizeof(why))) {
		snprintf(err, errlen, "ledger of %s: %s", node, why);
		return -1;
	}
	ledger_init(l, node);
	const char *rv = api_str(api_path(lease, "metadata"), "resourceVersion");
	snprintf(l->rv, sizeof(l->rv), "%s", rv ? rv : "");
	const char *text = api_annotation(lease, LEDGER_ANN_RESERVATIONS);
	if (!text || !*text)
		return 0;
	cJSON *list = cJSON_Parse(text);
	if (!cJSON_IsArray(list)) {
		cJSON_Delete(list);
		snprintf(err, errlen, "ledger of %s: %s is not a JSON list", node, LEDGER_ANN_RESERVATIONS);
		return -1;
	}
	const cJSON *it;
	int rc = 0;
	cJSON_ArrayForEach(it, list) {
		struct ledger_entry e;
		if ((rc = decode_entry(it, &e, err, errlen)) || (rc = ledger_add(l, &e)))
			break;
	}
	cJSON_Delete(list);
	if (rc)
		ledger_release(l);
	return rc;
}

/* The reservations list as the annotation's value (a JSON text). */
static int encode_list(const struct ledger *l, struct buf *out)
{
	buf_addc(out, '[');
	for (int i = 0; i < l->n; i++) {
		const struct ledger_entry *e = &l->e[i];
		buf_adds(out, i ? ",{\"uid\":" : "{\"uid\":");
		buf_add_json_str(out, e->a.uid);
		buf_adds(out, ",\"namespace\":");
		buf_add_json_str(out, e->ns);
		buf_adds(out, ",\"pod\":");
		buf_add_json_str(out, e->name);
		if (e->claim[0]) {
			buf_adds(out, ",\"claim\":");
			buf_add_json_str(out, e->claim);
		}
		if (e->gang[0]) {
			buf_adds(out, ",\"gang\":");
			buf_add_json_str(out, e->gang);
			if (e->gang_timeout_s)
				buf_printf(out, ",\"gangTimeoutSeconds\":%d", e->gang_timeout_s);
		}
		buf_printf(out, ",\"mode\":\"%s\",\"devices\":[", claim_mode_name(e->a.mode));
		for (int k = 0; k < e->a.ndev; k++)
			buf_printf(out, "%s%d", k ? "," : "", alloc_id(&e->a, k));
		buf_printf(out, "],\"memoryMiB\":%u,\"coreMilli\":%u,\"since\":%lld", e->a.mem_mib, e->a.core,
			   (long long)e->a.since);
		/* Only when set; older replicas ignore the key (and drop it when they rewrite the entry). */
		if (e->a.token)
			buf_printf(out, ",\"try\":%u", e->a.token);
		buf_addc(out, '}');
	}
	return buf_addc(out, ']');
}

int ledger_encode(const struct ledger *l, const char *ns, const char *holder, struct buf *out)
{
	char name[LEDGER_NAME_MAX + 20], now[40];
	ledger_lease_name(l->node, name, sizeof(name));
	ledger_microtime(now, sizeof(now));
	struct buf list;
	buf_init(&list, (size_t)1 << 20);   /* the API server allows 256 KiB of annotations */
	if (encode_list(l, &list)) {
		buf_release(&list);
		return -1;
	}
	buf_adds(out, "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":");
	buf_add_json_str(out, name);
	buf_adds(out, ",\"namespace\":");
	buf_add_json_str(out, ns);
	if (l->rv[0]) {
		buf_adds(out, ",\"resourceVersion\":");
		buf_add_json_str(out, l->rv);
	}
	buf_adds(out, ",\"labels\":{\"" LEDGER_LABEL "\":\"true\"},\"annotations\":{\"" LEDGER_ANN_VERSION "\":\""
		 STR(LEDGER_VERSION) "\",\"" LEDGER_ANN_NODE "\":");
	buf_add_json_str(out, l->node);
	buf_adds(out, ",\"" LEDGER_ANN_RESERVATIONS "\":");
	buf_add_json_str(out, buf_cstr(&list));
	buf_adds(out, "}},\"spec\":{\"holderIdentity\":");
	buf_add_json_str(out, holder);
	buf_printf(out, ",\"renewTime\":\"%s\"}}", now);
	buf_release(&list);
	return out->len ? 0 : -1;
}

int ledger_encode_reservation(const struct ledger_entry *e, const char *node, struct buf *out)
{
	char name[128], now[40], ids[256];
	ledger_reservation_name(e->a.uid, node, name, sizeof(name));
	ledger_microtime(now, sizeof(now));
	alloc_ids(&e->a, ids, sizeof(ids));
	buf_adds(out, "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":");
	buf_add_json_str(out, name);
	buf_adds(out, ",\"namespace\":");
	buf_add_json_str(out, e->ns);
	buf_adds(out, ",\"labels\":{\"" RESERVATION_LABEL "\":\"true\"},\"annotations\":{\"" LEDGER_ANN_VERSION
		 "\":\"" STR(LEDGER_VERSION) "\",\"" LEDGER_ANN_NODE "\":");
	buf_add_json_str(out, node);
	buf_adds(out, ",\"" ANN_ALLOCATED "\":");
	char alloc[512];
	snprintf(alloc, sizeof(alloc), "%s:%s", node, ids);
	buf_add_json_str(out, alloc);
	buf_adds(out, "},\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"name\":");
	buf_add_json_str(out, e->name);
	buf_adds(out, ",\"uid\":");
	buf_add_json_str(out, e->a.uid);
	buf_adds(out, "}]},\"spec\":{\"holderIdentity\":");
	char who[320];
	snprintf(who, sizeof(who), "%s/%s", e->ns, e->name);
	buf_add_json_str(out, who);
	buf_printf(out, ",\"acquireTime\":\"%s\",\"renewTime\":\"%s\"}}", now, now);
	return out->len ? 0 : -1;
}

/* ---- gang plans ---- */

static const char *const plan_states[] = { "Writing", "Written", "RolledBack" };

int ledger_intent_encode(const struct gang_intent *in, struct buf *out)
{
	buf_printf(out, "{\"plan\":\"%s\",\"total\":%d,\"state\":\"%s\",\"nodes\":[", in->plan, in->total,
		   plan_states[in->state]);
	for (int i = 0; i < in->nnodes; i++) {
		if (i)
			buf_addc(out, ',');
		buf_add_json_str(out, in->nodes[i]);
	}
	return buf_adds(out, "]}");
}

void ledger_intent_release(struct gang_intent *in)
{
	free(in->nodes);
	memset(in, 0, sizeof(*in));
}

static bool is_hex8(const char *s)
{
	for (int i = 0; i < 8; i++)
		if (!s[i] || !strchr("0123456789abcdef", s[i]))
			return false;
	return true;
}

int ledger_intent_decode(const char *text, struct gang_intent *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	cJSON *j = text ? cJSON_Parse(text) : NULL;
	const char *plan = api_str(j, "plan"), *state = api_str(j, "state");
	const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(j, "nodes");
	double total = 0;
	int st = -1;
	for (int k = 0; state && k < 3; k++)
		if (!strcmp(state, plan_states[k]))
			st = k;
	int rc = -1;
	if (!plan || strlen(plan) != 8 || !is_hex8(plan) || st < 0 || !cJSON_IsArray(nodes) ||
	    !api_whole(cJSON_GetObjectItemCaseSensitive(j, "total"), 1, GANG_SIZE_MAX, &total)) {
		snprintf(err, errlen, "%s: want {\"plan\": 8 hex digits, \"total\": 1..%d, \"state\": Writing|Written|"
			 "RolledBack, \"nodes\": [names]}", GANG_PLAN_ANN, GANG_SIZE_MAX);
		goto out;
	}
	snprintf(out->plan, sizeof(out->plan), "%s", plan);
	out->total = (int)total;
	out->state = (enum gang_plan_state)st;
	out->nodes = calloc((size_t)cJSON_GetArraySize(nodes) + 1, sizeof(*out->nodes));
	if (!out->nodes) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	const cJSON *n;
	cJSON_ArrayForEach(n, nodes) {
		if (!cJSON_IsString(n) || strlen(n->valuestring) >= sizeof(*out->nodes)) {
			snprintf(err, errlen, "%s: nodes must be node names", GANG_PLAN_ANN);
			goto out;
		}
		snprintf(out->nodes[out->nnodes++], sizeof(*out->nodes), "%s", n->valuestring);
	}
	rc = 0;
out:
	if (rc)
		ledger_intent_release(out);
	cJSON_Delete(j);
	return rc;
}

void ledger_place_uid(const char *id, const char *plan, int slot, char *out, size_t size)
{
	snprintf(out, size, LEDGER_PLACE_PREFIX "%s-p%s-%d", id, plan, slot);
}

bool ledger_place_plan(const char *uid, char plan[9])
{
	/* gang- 16 hex digits - p 8 hex digits - slot */
	size_t pre = sizeof(LEDGER_PLACE_PREFIX) - 1;
	if (strncmp(uid, LEDGER_PLACE_PREFIX, pre) || strlen(uid) < pre + 16 + 12 || uid[pre + 16] != '-' ||
	    uid[pre + 17] != 'p' || !is_hex8(uid + pre + 18) || uid[pre + 26] != '-')
		return false;
	memcpy(plan, uid + pre + 18, 8);
	plan[8] = '\0';
	return true;
}
