/*
 * libFuzzer target: an AdmissionReview body through the webhook's HTTP
 * handler (webhook_mutate), as the API server sends it. Besides "no crash",
 * it checks what the API server relies on:
 *
 *   - the reply is JSON;
 *   - a patch decodes (base64, then JSON) and applies to request.object
 *     (every "add" has an existing parent and a valid array index, every
 *     "remove" an existing target);
 *   - applying it is enough: webhook_patch() on the patched pod asks for
 *     nothing more (reinvocationPolicy IfNeeded relies on that).
 */
#include "fuzz.h"

#include "base64.h"
#include "webhook.h"

#include <ctype.h>
#include <stdbool.h>

static struct api_resources res;
static struct webhook_opts opts;
static struct webhook *wh;

/* One RFC 6901 reference token, unescaped (~1 -> /, ~0 -> ~). */
static void token(const char *s, size_t n, char *out, size_t size)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < size; i++) {
		if (s[i] == '~' && i + 1 < n && (s[i + 1] == '0' || s[i + 1] == '1'))
			out[o++] = s[++i] == '1' ? '/' : '~';
		else
			out[o++] = s[i];
	}
	out[o] = '\0';
}

/* An array index as RFC 6901 spells it (no sign, no leading zero); -1 if not one. */
static long index_of(const char *t)
{
	size_t n = strlen(t);
	if (!n || n > 9 || (n > 1 && t[0] == '0'))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)t[i]))
			return -1;
	return strtol(t, NULL, 10);
}

/* RFC 6902 "add" of value at path in doc, or "remove" when value is NULL. false when it does not apply. */
static bool apply_op(cJSON *doc, const char *path, cJSON *value)
{
	if (path[0] != '/')
		return false;
	cJSON *parent = doc;
	const char *p = path + 1;
	char tok[1024];
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		token(p, n, tok, sizeof(tok));
		if (!slash)
			break;
		if (cJSON_IsObject(parent)) {
			parent = cJSON_GetObjectItemCaseSensitive(parent, tok);
		} else if (cJSON_IsArray(parent)) {
			long i = index_of(tok);
			parent = i < 0 ? NULL : cJSON_GetArrayItem(parent, (int)i);
		} else {
			return false;
		}
		if (!parent)
			return false;
		p = slash + 1;
	}
	if (!value) {
		cJSON *gone = cJSON_IsObject(parent) ? cJSON_DetachItemFromObjectCaseSensitive(parent, tok) : NULL;
		cJSON_Delete(gone);
		return gone != NULL;
	}
	if (cJSON_IsObject(parent)) {
		if (cJSON_GetObjectItemCaseSensitive(parent, tok))
			return cJSON_ReplaceItemInObjectCaseSensitive(parent, tok, value);
		return cJSON_AddItemToObject(parent, tok, value);
	}
	if (!cJSON_IsArray(parent))
		return false;
	long i = strcmp(tok, "-") ? index_of(tok) : cJSON_GetArraySize(parent);
	if (i < 0 || i > cJSON_GetArraySize(parent))
		return false;
	if (i == cJSON_GetArraySize(parent))
		return cJSON_AddItemToArray(parent, value);
	return cJSON_InsertItemInArray(parent, (int)i, value);
}

static void check_patch(const cJSON *reply, const char *body, size_t len)
{
	const char *b64 = api_str(cJSON_GetObjectItemCaseSensitive(reply, "response"), "patch");
	if (!b64)
		return;
	struct buf text;
	buf_init(&text, 16u << 20);
	if (base64_decode(b64, &text))
		abort();
	cJSON *patch = cJSON_ParseWithLength(text.data, text.len);
	cJSON *review = cJSON_ParseWithLengthOpts(body, len + 1, NULL, true);
	cJSON *pod = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(review, "request"),
							     "object");
	if (!cJSON_IsArray(patch) || !pod)
		abort();
	const cJSON *op;
	cJSON_ArrayForEach(op, patch) {
		const char *verb = api_str(op, "op"), *path = api_str(op, "path");
		const cJSON *value = cJSON_GetObjectItemCaseSensitive(op, "value");
		bool remove = verb && !strcmp(verb, "remove");
		if (!verb || (strcmp(verb, "add") && !remove) || !path || (!value && !remove))
			abort();   /* the webhook only adds and removes */
		if (!apply_op(pod, path, remove ? NULL : cJSON_Duplicate(value, true))) {
			fprintf(stderr, "patch op does not apply: %s\n", path);
			abort();
		}
	}
	struct buf again;
	buf_init(&again, 16u << 20);
	char err[256];
	if (webhook_patch(pod, NULL, &opts, &again, err, sizeof(err)) || again.len) {
		fprintf(stderr, "the patched pod asks for more: %s %.*s\n", err, (int)again.len,
			again.data ? again.data : "");
		abort();
	}
	buf_release(&again);
	cJSON_Delete(pod);
	cJSON_Delete(review);
	cJSON_Delete(patch);
	buf_release(&text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!wh) {
		fuzz_quiet();
		api_resources_default(&res);
		opts = (struct webhook_opts){ .res = &res, .marker_resource = "gpu.scheduling/claim" };
		wh = webhook_new(&opts);
		if (!wh)
			abort();
	}
	char *body = fuzz_cstr(data, size);
	cJSON *reply = fuzz_handler(webhook_mutate, wh, body, size);
	check_patch(reply, body, size);
	cJSON_Delete(reply);
	free(body);
	return 0;
}
