/*
 * Decoding ExtenderArgs, what filter and prioritize receive (and preempt's
 * pod): the pod, its claim, the candidate nodes by name or as objects.
 */
#include "extender_impl.h"
#include "jsonarena.h"
#include "jsonscan.h"

#include <stdlib.h>
#include <string.h>

void extender_args_release(struct verb_args *a)
{
	claim_release(&a->claim);
	free(a->names);
	free(a->plain_len);
	free(a->items);
	free(a->text);
	jsonarena_delete(a->root);
	jsonarena_delete(a->nodes_root);
}

int extender_parse_pod(struct extender *x, struct verb_args *a, const cJSON *pod, struct http_response *resp)
{
	a->pod = pod;
	if (!cJSON_IsObject(a->pod)) {
		httpd_error(resp, 400, "request has no Pod object");
		return -1;
	}
	api_pod_ref(a->pod, &a->ref);
	a->soft_preferences = api_pod_soft_preferences(a->pod);
	cache_claims_rdlock(x->o.cache);
	a->claim_ok = !api_pod_claim(a->pod, x->o.res, cache_gpuclaim_lookup, x->o.cache,
				     &a->claim, a->claim_err, sizeof(a->claim_err));
	cache_claims_unlock(x->o.cache);
	if (a->claim_ok && a->ref.uid[0])
		pending_put(&x->pending, a->ref.uid, &a->claim);
	return 0;
}

/*
 * NodeNames, the request's one big value, without a cJSON node per name:
 * each name is decoded in place in a->text (a decoded string and its NUL
 * never outgrow the literal).
 */
static int parse_names(struct verb_args *a, struct jsonscan *s, struct http_response *resp)
{
	if (jsonscan_open(s, '[')) {
		httpd_error(resp, 400, "NodeNames must be a list of strings");
		return -1;
	}
	a->by_name = true;
	int cap = 0, seen = 0, more;
	while ((more = jsonscan_next(s, '[', &seen, NULL)) == 1) {
		struct json_str lit;
		if (jsonscan_string(s, &lit)) {
			httpd_error(resp, 400, "NodeNames[%d] is not a string", a->n);
			return -1;
		}
		char *name = (char *)lit.raw + 1;   /* inside a->text, which we own */
		long len = json_str_decode(&lit, name);
		if (len < 0) {
			httpd_error(resp, 400, "NodeNames[%d] has an invalid \\u escape", a->n);
			return -1;
		}
		if (a->n == cap) {
			cap = cap ? cap * 2 : 1024;
			const char **names = realloc(a->names, (size_t)cap * sizeof(*names));
			if (names)
				a->names = names;
			int32_t *lens = realloc(a->plain_len, (size_t)cap * sizeof(*lens));
			if (lens)
				a->plain_len = lens;
			if (!names || !lens) {
				httpd_error(resp, 500, "out of memory");
				return -1;
			}
		}
		/* A literal without escapes has nothing to escape on the way back. */
		a->plain_len[a->n] = lit.escaped || len > INT32_MAX ? -1 : (int32_t)len;
		a->names[a->n++] = name;
	}
	if (more) {
		httpd_error(resp, 400, "request body is not valid JSON (in NodeNames)");
		return -1;
	}
	return 0;
}

static cJSON *parse_member(const struct jsonscan *v)
{
	return v->p ? cJSON_ParseWithLength(v->p, (size_t)(v->end - v->p)) : NULL;
}

/* The Nodes form: the names from each item's metadata. */
static int parse_nodes(struct verb_args *a, const struct jsonscan *v, struct http_response *resp)
{
	a->nodes_root = parse_member(v);
	const cJSON *nodes = a->nodes_root;
	const cJSON *items = cJSON_GetObjectItem(nodes, "items");
	if (!cJSON_IsObject(nodes) || (items && !cJSON_IsNull(items) && !cJSON_IsArray(items))) {
		httpd_error(resp, 400, "request has neither NodeNames nor a Nodes list");
		return -1;
	}
	a->n = cJSON_GetArraySize(items);
	a->names = calloc((size_t)a->n + 1, sizeof(*a->names));
	a->items = calloc((size_t)a->n + 1, sizeof(*a->items));
	if (!a->names || !a->items) {
		httpd_error(resp, 500, "out of memory");
		return -1;
	}
	int i = 0;
	cJSON *it;
	cJSON_ArrayForEach(it, items) {
		const char *name = api_str(api_path(it, "metadata"), "name");
		if (!name) {
			httpd_error(resp, 400, "Nodes.items[%d] has no metadata.name", i);
			return -1;
		}
		a->items[i] = it;
		a->names[i++] = name;
	}
	return 0;
}

void extender_add_name(struct buf *out, const struct verb_args *a, int i)
{
	if (a->plain_len && a->plain_len[i] >= 0)
		buf_add_quoted(out, a->names[i], (size_t)a->plain_len[i]);
	else
		buf_add_json_str(out, a->names[i]);
}

/*
 * Decodes ExtenderArgs in one checked pass over the body; on a malformed
 * request sets a 400 reply. Of a member named twice the first counts (as
 * cJSON picks); names match ignoring case (as Go's encoding/json does).
 */
int extender_parse_args(struct extender *x, const struct http_request *req, struct verb_args *a,
			struct http_response *resp)
{
	memset(a, 0, sizeof(*a));
	claim_init(&a->claim);
	a->text = malloc(req->body_len + 1);
	if (!a->text) {
		httpd_error(resp, 500, "out of memory");
		return -1;
	}
	memcpy(a->text, req->body, req->body_len);
	a->text[req->body_len] = '\0';
	struct jsonscan s = { a->text, a->text + req->body_len }, pod = { 0 }, nodes = { 0 };
	bool names_seen = false;
	int seen = 0, more = -1;
	struct json_str key;
	if (!jsonscan_open(&s, '{')) {
		while ((more = jsonscan_next(&s, '{', &seen, &key)) == 1) {
			if (!names_seen && json_str_ieq(&key, "NodeNames")) {
				names_seen = true;
				if (jsonscan_peek(&s) != 'n') {
					if (parse_names(a, &s, resp))
						return -1;
					continue;
				}
			}
			jsonscan_peek(&s);   /* past the blanks: value starts at the value */
			struct jsonscan value = s;
			if (jsonscan_skip(&s))
				break;
			value.end = s.p;
			if (!pod.p && json_str_ieq(&key, "Pod"))
				pod = value;
			else if (!nodes.p && json_str_ieq(&key, "Nodes"))
				nodes = value;
		}
	}
	if (more || !jsonscan_at_end(&s)) {
		httpd_error(resp, 400, "request body is not a JSON object");
		return -1;
	}
	a->root = parse_member(&pod);
	if (extender_parse_pod(x, a, a->root, resp))
		return -1;
	a->uid_bits = cache_uid_bits(a->ref.uid);
	return a->by_name ? 0 : parse_nodes(a, &nodes, resp);
}

