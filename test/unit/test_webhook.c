/*
 * The mutating webhook: the JSON patch for each kind of pod (applied here by
 * a small RFC 6902 "add" interpreter that fails like the API server's does
 * on a missing parent), and the AdmissionReview handler called in-process
 * under a per-request cJSON arena, as httpd runs it.
 */
#include "testutil.h"

#include "base64.h"
#include "jsonarena.h"
#include "log.h"
#include "webhook.h"

#include <stdio.h>
#include <stdlib.h>

static struct api_resources res;
static struct webhook_opts opts;

static int setup(void **state)
{
	(void)state;
	api_resources_default(&res);
	opts = (struct webhook_opts){ .res = &res, .marker_resource = "gpu.scheduling/claim" };
	return 0;
}

/* JSON written with ' for " (for readability); the caller frees. */
static char *sq(const char *text)
{
	char *s = strdup(text);
	assert_non_null(s);
	for (char *p = s; *p; p++)
		if (*p == '\'')
			*p = '"';
	return s;
}

static cJSON *J(const char *text)
{
	char *s = sq(text);
	cJSON *j = cJSON_Parse(s);
	free(s);
	assert_non_null(j);
	return j;
}

/* ---- a tiny JSON patch interpreter ("add" only) ------------------------- */

/* Next reference token of a JSON pointer, unescaped (~1 -> /, ~0 -> ~). */
static const char *next_token(const char *p, char *tok, size_t size)
{
	size_t n = 0;
	assert_true(*p == '/');
	for (p++; *p && *p != '/'; p++) {
		char c = *p;
		if (c == '~') {
			p++;
			assert_true(*p == '0' || *p == '1');
			c = *p == '0' ? '~' : '/';
		}
		assert_true(n + 1 < size);
		tok[n++] = c;
	}
	tok[n] = '\0';
	return p;
}

/*
 * Applies one add (or, value NULL, one remove); -1 when the target's parent
 * (for remove, the target) does not exist, as the API server would fail.
 */
static int apply_add(cJSON *doc, const char *path, const cJSON *value)
{
	char tok[512];
	cJSON *parent = doc;
	const char *p = path;
	for (;;) {
		p = next_token(p, tok, sizeof(tok));
		if (!*p)
			break;
		parent = cJSON_IsArray(parent) ? cJSON_GetArrayItem(parent, atoi(tok))
					       : cJSON_GetObjectItemCaseSensitive(parent, tok);
		if (!parent)
			return -1;
	}
	if (!value) {                      /* remove: the target must exist */
		cJSON *gone = cJSON_IsObject(parent) ? cJSON_DetachItemFromObjectCaseSensitive(parent, tok) : NULL;
		cJSON_Delete(gone);
		return gone ? 0 : -1;
	}
	cJSON *v = cJSON_Duplicate(value, 1);
	if (cJSON_IsObject(parent)) {
		cJSON_DeleteItemFromObjectCaseSensitive(parent, tok);
		cJSON_AddItemToObject(parent, tok, v);
		return 0;
	}
	if (cJSON_IsArray(parent)) {
		if (!strcmp(tok, "-")) {
			cJSON_AddItemToArray(parent, v);
			return 0;
		}
		int i = atoi(tok);
		if (i >= 0 && i <= cJSON_GetArraySize(parent)) {
			cJSON_InsertItemInArray(parent, i, v);
			return 0;
		}
	}
	cJSON_Delete(v);
	return -1;
}

static int apply(cJSON *doc, const char *patch)
{
	cJSON *ops = cJSON_Parse(patch);
	assert_true(cJSON_IsArray(ops));
	const cJSON *op;
	int rc = 0;
	cJSON_ArrayForEach(op, ops) {
		const char *verb = cJSON_GetObjectItem(op, "op")->valuestring;
		bool remove = !strcmp(verb, "remove");
		assert_true(remove || !strcmp(verb, "add"));
		const cJSON *path = cJSON_GetObjectItem(op, "path"), *value = cJSON_GetObjectItem(op, "value");
		assert_true(cJSON_IsString(path));
		assert_true(remove ? value == NULL : value != NULL);
		if (!rc)
			rc = apply_add(doc, path->valuestring, remove ? NULL : value);
	}
	cJSON_Delete(ops);
	return rc;
}

/* The patch for a pod as text ("" when none); asserts success. Caller frees. */
static char *patch_of(const cJSON *pod, const struct webhook_opts *o)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	char err[256] = "";
	int rc = webhook_patch(pod, NULL, o, &b, err, sizeof(err));
	if (rc)
		fail_msg("webhook_patch: %s", err);
	char *s = strdup(buf_cstr(&b));
	buf_release(&b);
	return s;
}

/* Patches pod in place; returns the number of operations (0: no patch). */
static int mutate(cJSON *pod)
{
	char *patch = patch_of(pod, &opts);
	int n = 0;
	if (patch[0]) {
		cJSON *ops = cJSON_Parse(patch);
		n = cJSON_GetArraySize(ops);
		cJSON_Delete(ops);
		assert_int_equal(apply(pod, patch), 0);
	}
	free(patch);
	return n;
}

static const cJSON *ctr(const cJSON *pod, const char *field, int i)
{
	const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "spec"), field), i);
	assert_non_null(c);
	return c;
}

static const cJSON *env_get(const cJSON *c, const char *name, int *count)
{
	const cJSON *e, *found = NULL;
	*count = 0;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "env")) {
		const cJSON *n = cJSON_GetObjectItem(e, "name");
		if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) {
			found = e;
			(*count)++;
		}
	}
	return found;
}

/* The container has var as a downward-API reference to annotation, exactly once. */
static void assert_env_ref(const cJSON *c, const char *var, const char *annotation)
{
	int count;
	const cJSON *e = env_get(c, var, &count);
	assert_non_null(e);
	assert_int_equal(count, 1);
	const cJSON *fr = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "valueFrom"), "fieldRef");
	assert_non_null(fr);
	char want[512];
	snprintf(want, sizeof(want), "metadata.annotations['%s']", annotation);
	assert_string_equal(cJSON_GetObjectItem(fr, "fieldPath")->valuestring, want);
	assert_string_equal(cJSON_GetObjectItem(fr, "apiVersion")->valuestring, "v1");
	assert_null(cJSON_GetObjectItem(e, "value"));
}

static void assert_all_env(const cJSON *c)
{
	assert_env_ref(c, "CUDA_VISIBLE_DEVICES", ANN_CUDA);
	assert_env_ref(c, "NVIDIA_VISIBLE_DEVICES", ANN_NVIDIA);
	assert_env_ref(c, "ROCR_VISIBLE_DEVICES", ANN_ROCR);
	assert_env_ref(c, "ZE_AFFINITY_MASK", ANN_ZE);
}

static const char *label(const cJSON *pod, const char *key)
{
	return api_label(pod, key);
}

static const char *quantity(const cJSON *c, const char *list, const char *name)
{
	return api_str(api_path(cJSON_GetObjectItem(c, "resources"), list), name);
}

/* ---- webhook_patch -------------------------------------------------------- */

static const char *resource_pod =
	"{'apiVersion':'v1','kind':'Pod','metadata':{'name':'train','namespace':'ml','labels':{'app':'x'}},"
	"'spec':{'initContainers':[{'name':'init','image':'i'}],"
	"'containers':[{'name':'a','image':'a'},"
	"{'name':'b','image':'b','env':[{'name':'FOO','value':'bar'},{'name':'CUDA_VISIBLE_DEVICES','valueFrom':{'fieldRef':{'apiVersion':'v1',"
	"'fieldPath':'metadata.annotations[\\u0027gpu.scheduling/cuda-visible-devices\\u0027]'}}}],"
	"'resources':{'limits':{'gpu.scheduling/gpu':'2','cpu':'1'}}}]}}";

static void test_resource_pod(void **state)
{
	(void)state;
	cJSON *pod = J(resource_pod);
	char *patch = patch_of(pod, &opts);
	/* No env: the whole list; an env list: appended with /-; an entry already there is not added again. */
	assert_non_null(strstr(patch, "\"path\":\"/spec/containers/0/env\",\"value\":[{\"name\":\"CUDA_VISIBLE_DEVICES\""));
	assert_non_null(strstr(patch, "\"path\":\"/spec/containers/1/env/-\",\"value\":{\"name\":\"NVIDIA_VISIBLE_DEVICES\""));
	assert_null(strstr(patch, "\"path\":\"/spec/containers/1/env/-\",\"value\":{\"name\":\"CUDA_VISIBLE_DEVICES\""));
	assert_non_null(strstr(patch, "\"path\":\"/spec/initContainers/0/env\""));
	assert_non_null(strstr(patch, "\"path\":\"/metadata/labels/gpu.scheduling~1managed\",\"value\":\"true\""));
	assert_null(strstr(patch, "resources"));   /* no marker: the pod names a GPU resource */
	assert_int_equal(apply(pod, patch), 0);
	free(patch);

	assert_all_env(ctr(pod, "containers", 0));
	assert_all_env(ctr(pod, "initContainers", 0));
	const cJSON *b = ctr(pod, "containers", 1);
	assert_all_env(b);
	/* The user's variables keep their place. */
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "env"), 0), "name")->valuestring, "FOO");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(b, "env")), 5);
	assert_string_equal(label(pod, LABEL_MANAGED), "true");
	assert_string_equal(label(pod, "app"), "x");
	assert_null(quantity(ctr(pod, "containers", 0), "limits", "gpu.scheduling/claim"));
	assert_null(quantity(b, "limits", "gpu.scheduling/claim"));
	assert_string_equal(quantity(b, "limits", "gpu.scheduling/gpu"), "2");

	/* Reinvoked (reinvocationPolicy IfNeeded): nothing more to add. */
	assert_int_equal(mutate(pod), 0);
	cJSON_Delete(pod);
}

static void test_which_resources_count(void **state)
{
	(void)state;
	/* requests only, init container only, memory and core names, and configured aliases. */
	const char *pods[] = {
		"{'metadata':{},'spec':{'containers':[{'name':'a','resources':{'requests':{'gpu.scheduling/gpu-memory':'4096'}}}]}}",
		"{'metadata':{},'spec':{'containers':[{'name':'a'}],'initContainers':[{'name':'i','resources':{'limits':{'gpu.scheduling/gpu-core':'50'}}}]}}",
		"{'metadata':{},'spec':{'containers':[{'name':'a'},{'name':'b','resources':{'limits':{'gpu.scheduling/gpu':'0'}}}]}}",
	};
	for (size_t i = 0; i < sizeof(pods) / sizeof(pods[0]); i++) {
		cJSON *pod = J(pods[i]);
		assert_true(mutate(pod) > 0);
		assert_all_env(ctr(pod, "containers", 0));
		assert_string_equal(label(pod, LABEL_MANAGED), "true");
		assert_null(quantity(ctr(pod, "containers", 0), "limits", "gpu.scheduling/claim"));
		cJSON_Delete(pod);
	}
	struct api_resources mine;
	api_resources_default(&mine);
	char err[128];
	assert_int_equal(api_resources_set(&mine, "gpu", "nvidia.com/gpu, amd.com/gpu", err, sizeof(err)), 0);
	struct webhook_opts o = { .res = &mine, .marker_resource = "gpu.scheduling/claim" };
	cJSON *pod = J("{'metadata':{},'spec':{'containers':[{'name':'a','resources':{'limits':{'amd.com/gpu':'1'}}}]}}");
	char *patch = patch_of(pod, &o);
	assert_non_null(strstr(patch, "ROCR_VISIBLE_DEVICES"));
	free(patch);
	/* With the defaults, amd.com/gpu is not ours. */
	patch = patch_of(pod, &opts);
	assert_string_equal(patch, "");
	free(patch);
	cJSON_Delete(pod);
}

static void test_claim_only_pod_no_labels(void **state)
{
	(void)state;
	cJSON *pod = J("{'metadata':{'name':'p','namespace':'ml','annotations':{'gpu.scheduling/claim':'pair'}},"
		       "'spec':{'containers':[{'name':'a'},{'name':'b'}]}}");
	char *patch = patch_of(pod, &opts);
	assert_non_null(strstr(patch, "{\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":{\"gpu.scheduling/managed\":\"true\"}}"));
	assert_non_null(strstr(patch, "{\"op\":\"add\",\"path\":\"/spec/containers/0/resources\",\"value\":"
				      "{\"limits\":{\"gpu.scheduling/claim\":\"1\"},\"requests\":{\"gpu.scheduling/claim\":\"1\"}}}"));
	assert_int_equal(apply(pod, patch), 0);
	free(patch);
	assert_all_env(ctr(pod, "containers", 0));
	assert_all_env(ctr(pod, "containers", 1));
	assert_string_equal(label(pod, LABEL_MANAGED), "true");
	assert_string_equal(quantity(ctr(pod, "containers", 0), "limits", "gpu.scheduling/claim"), "1");
	assert_string_equal(quantity(ctr(pod, "containers", 0), "requests", "gpu.scheduling/claim"), "1");
	assert_null(cJSON_GetObjectItem(ctr(pod, "containers", 1), "resources"));   /* the first container only */
	assert_int_equal(mutate(pod), 0);
	cJSON_Delete(pod);
}

static void test_claim_only_pod_labels_present(void **state)
{
	(void)state;
	/* labels present; resources with limits but no requests; an empty env list. */
	cJSON *pod = J("{'metadata':{'labels':{'team':'ml','gpu.scheduling/managed':'false'},"
		       "'annotations':{'gpu.scheduling/claim':'pair'}},"
		       "'spec':{'containers':[{'name':'a','env':[],'resources':{'limits':{'cpu':'2'}}}]}}");
	char *patch = patch_of(pod, &opts);
	assert_non_null(strstr(patch, "\"path\":\"/metadata/labels/gpu.scheduling~1managed\",\"value\":\"true\""));
	assert_non_null(strstr(patch, "\"path\":\"/spec/containers/0/resources/limits/gpu.scheduling~1claim\",\"value\":\"1\""));
	assert_non_null(strstr(patch, "\"path\":\"/spec/containers/0/resources/requests\",\"value\":{\"gpu.scheduling/claim\":\"1\"}"));
	assert_non_null(strstr(patch, "\"path\":\"/spec/containers/0/env/-\""));
	assert_int_equal(apply(pod, patch), 0);
	free(patch);
	const cJSON *a = ctr(pod, "containers", 0);
	assert_all_env(a);
	assert_string_equal(label(pod, LABEL_MANAGED), "true");
	assert_string_equal(label(pod, "team"), "ml");
	assert_string_equal(quantity(a, "limits", "cpu"), "2");
	assert_string_equal(quantity(a, "limits", "gpu.scheduling/claim"), "1");
	assert_string_equal(quantity(a, "requests", "gpu.scheduling/claim"), "1");
	assert_int_equal(mutate(pod), 0);
	cJSON_Delete(pod);

	/* A claim pod that also names a GPU resource gets no marker. */
	pod = J("{'metadata':{'annotations':{'gpu.scheduling/claim':'x'}},"
		"'spec':{'containers':[{'name':'a','resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]}}");
	assert_true(mutate(pod) > 0);
	assert_null(quantity(ctr(pod, "containers", 0), "limits", "gpu.scheduling/claim"));
	assert_null(quantity(ctr(pod, "containers", 0), "requests", "gpu.scheduling/claim"));
	cJSON_Delete(pod);

	/* No marker configured: env and label only. */
	struct webhook_opts o = { .res = &res, .marker_resource = "" };
	pod = J("{'metadata':{'annotations':{'gpu.scheduling/claim':'x'}},'spec':{'containers':[{'name':'a'}]}}");
	char *p2 = patch_of(pod, &o);
	assert_null(strstr(p2, "resources"));
	assert_non_null(strstr(p2, "CUDA_VISIBLE_DEVICES"));
	free(p2);
	cJSON_Delete(pod);
}

static void test_pointer_escaping(void **state)
{
	(void)state;
	/* ~ and / in a key: ~0 and ~1, in that order of decoding. */
	struct webhook_opts o = { .res = &res, .marker_resource = "example.com/odd~name" };
	cJSON *pod = J("{'metadata':{'annotations':{'gpu.scheduling/claim':'x'}},"
		       "'spec':{'containers':[{'name':'a','resources':{'limits':{},'requests':{}}}]}}");
	char *patch = patch_of(pod, &o);
	assert_non_null(strstr(patch, "\"/spec/containers/0/resources/limits/example.com~1odd~0name\""));
	assert_non_null(strstr(patch, "\"/spec/containers/0/resources/requests/example.com~1odd~0name\""));
	assert_int_equal(apply(pod, patch), 0);
	assert_string_equal(quantity(ctr(pod, "containers", 0), "limits", "example.com/odd~name"), "1");
	free(patch);
	cJSON_Delete(pod);

	/* No metadata at all: the whole object. */
	pod = J("{'spec':{'containers':[{'name':'a','resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]}}");
	patch = patch_of(pod, &opts);
	assert_non_null(strstr(patch, "\"path\":\"/metadata\",\"value\":{\"labels\":{\"gpu.scheduling/managed\":\"true\"}}"));
	assert_int_equal(apply(pod, patch), 0);
	assert_string_equal(label(pod, LABEL_MANAGED), "true");
	free(patch);
	cJSON_Delete(pod);
}

static void test_other_pods_untouched(void **state)
{
	(void)state;
	const char *pods[] = {
		"{'metadata':{'name':'web'},'spec':{'containers':[{'name':'a','image':'nginx'}]}}",
		"{'metadata':{'labels':{'gpu.scheduling/managed':'true'}},'spec':{'containers':[{'name':'a'}]}}",
		"{'metadata':{'annotations':{'gpu.scheduling/policy':'spread'}},'spec':{'containers':[{'name':'a',"
		"'resources':{'limits':{'nvidia.com/gpu':'1','cpu':'1'},'requests':{'memory':'1Gi'}}}]}}",
		"{'metadata':{},'spec':{'containers':[{'name':'a','resources':null,'env':'not checked: not ours'}]}}",
	};
	for (size_t i = 0; i < sizeof(pods) / sizeof(pods[0]); i++) {
		cJSON *pod = J(pods[i]);
		char *patch = patch_of(pod, &opts);
		assert_string_equal(patch, "");
		free(patch);
		cJSON_Delete(pod);
	}
}

static void test_malformed_pods(void **state)
{
	(void)state;
	static const struct {
		const char *pod, *err;
	} cases[] = {
		{ "[]", "no spec.containers list" },
		{ "{'metadata':{}}", "no spec.containers list" },
		{ "{'spec':{'containers':{}}}", "no spec.containers list" },
		{ "{'metadata':{'annotations':{'gpu.scheduling/claim':'x'}},'spec':{'containers':['a']}}", "spec.containers[0] is not an object" },
		{ "{'metadata':{'annotations':{'gpu.scheduling/claim':'x'}},'spec':{'containers':[{'name':'a','env':{}}]}}", "spec.containers[0].env is not a list" },
		{ "{'metadata':{'annotations':{'gpu.scheduling/claim':'x'}},'spec':{'containers':[{'name':'a'}],'initContainers':{}}}", "spec.initContainers is not a list" },
		{ "{'metadata':{'annotations':{'gpu.scheduling/claim':'x'}},'spec':{'containers':[{'name':'a'}],'initContainers':[{},{'env':3}]}}", "spec.initContainers[1].env is not a list" },
		{ "{'metadata':'m','spec':{'containers':[{'resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]}}", "metadata is not an object" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cJSON *pod = J(cases[i].pod);
		struct buf b;
		buf_init(&b, 1 << 20);
		char err[256] = "";
		assert_int_equal(webhook_patch(pod, NULL, &opts, &b, err, sizeof(err)), -1);
		if (!strstr(err, cases[i].err))
			fail_msg("case %zu: '%s' does not say '%s'", i, err, cases[i].err);
		assert_int_equal(b.len, 0);
		buf_release(&b);
		cJSON_Delete(pod);
	}
	/* A patch over the caller's cap is an error, and the buffer is left as it was. */
	cJSON *pod = J(resource_pod);
	struct buf b;
	buf_init(&b, 200);
	buf_adds(&b, "keep");
	char err[256];
	assert_int_equal(webhook_patch(pod, NULL, &opts, &b, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "size limit of 200 bytes"));
	assert_string_equal(buf_cstr(&b), "keep");
	buf_release(&b);
	cJSON_Delete(pod);
}

static void test_many_containers(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_adds(&b, "{\"metadata\":{},\"spec\":{\"containers\":[");
	for (int i = 0; i < 300; i++)
		buf_printf(&b, "%s{\"name\":\"c%d\"%s}", i ? "," : "", i,
			   i == 150 ? ",\"resources\":{\"requests\":{\"gpu.scheduling/gpu\":\"1\"}}" : "");
	buf_adds(&b, "]}}");
	cJSON *pod = cJSON_Parse(buf_cstr(&b));
	buf_release(&b);
	assert_int_equal(mutate(pod), 301);
	for (int i = 0; i < 300; i += 37)
		assert_all_env(ctr(pod, "containers", i));
	cJSON_Delete(pod);
}

/* ---- the handler ------------------------------------------------------------ */

struct reply {
	int status;
	cJSON *json;     /* the parsed body (caller deletes) */
};

/* Calls /mutate as httpd does: under a per-request arena. */
static struct reply call(struct webhook *w, const char *body, size_t len)
{
	struct http_request req = { "POST", "/mutate", body, len, NULL };
	struct http_response resp = { .status = 200 };
	buf_init(&resp.body, 1 << 24);
	struct jsonarena arena;
	jsonarena_begin(&arena, 64u << 20);
	webhook_mutate(w, &req, &resp);
	jsonarena_end(&arena);
	struct reply r = { resp.status, cJSON_Parse(buf_cstr(&resp.body)) };
	if (!r.json)
		fail_msg("reply is not JSON: %s", buf_cstr(&resp.body));
	assert_true(!resp.content_type || !strcmp(resp.content_type, "application/json"));
	buf_release(&resp.body);
	return r;
}

static struct reply call_s(struct webhook *w, const char *body)
{
	return call(w, body, strlen(body));
}

static char *review(const char *uid, const char *op, const char *object)
{
	char *obj = sq(object);
	struct buf b;
	buf_init(&b, 1 << 20);
	buf_printf(&b, "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{"
		       "\"uid\":\"%s\",\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"},"
		       "\"resource\":{\"group\":\"\",\"version\":\"v1\",\"resource\":\"pods\"},\"namespace\":\"ml\","
		       "\"operation\":\"%s\",\"userInfo\":{\"username\":\"u\"},\"object\":%s,\"oldObject\":null,\"dryRun\":false}}",
		   uid, op, obj);
	free(obj);
	return buf_detach(&b, NULL);
}

static const cJSON *response_of(const struct reply *r, const char *uid)
{
	assert_int_equal(r->status, 200);
	assert_string_equal(cJSON_GetObjectItem(r->json, "apiVersion")->valuestring, "admission.k8s.io/v1");
	assert_string_equal(cJSON_GetObjectItem(r->json, "kind")->valuestring, "AdmissionReview");
	assert_null(cJSON_GetObjectItem(r->json, "request"));
	const cJSON *resp = cJSON_GetObjectItem(r->json, "response");
	assert_true(cJSON_IsObject(resp));
	assert_string_equal(cJSON_GetObjectItem(resp, "uid")->valuestring, uid);
	return resp;
}

static void assert_allowed_unchanged(const struct reply *r, const char *uid)
{
	const cJSON *resp = response_of(r, uid);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(resp, "allowed")));
	assert_null(cJSON_GetObjectItem(resp, "patch"));
	assert_null(cJSON_GetObjectItem(resp, "patchType"));
	assert_null(cJSON_GetObjectItem(resp, "status"));
}

static void assert_denied(const struct reply *r, const char *uid, const char *why)
{
	const cJSON *resp = response_of(r, uid);
	assert_true(cJSON_IsFalse(cJSON_GetObjectItem(resp, "allowed")));
	assert_null(cJSON_GetObjectItem(resp, "patch"));
	const cJSON *st = cJSON_GetObjectItem(resp, "status");
	assert_int_equal(cJSON_GetObjectItem(st, "code")->valueint, 400);
	const char *msg = cJSON_GetObjectItem(st, "message")->valuestring;
	if (!strstr(msg, why))
		fail_msg("message '%s' does not say '%s'", msg, why);
}

static void test_review_gpu_pod(void **state)
{
	(void)state;
	struct webhook *w = webhook_new(&opts);
	assert_non_null(w);
	char *body = review("705ab4f5-6393-11e8-b7cc-42010a800002", "CREATE", resource_pod);
	struct reply r = call_s(w, body);
	const cJSON *resp = response_of(&r, "705ab4f5-6393-11e8-b7cc-42010a800002");
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(resp, "allowed")));
	assert_true(cJSON_IsString(cJSON_GetObjectItem(resp, "patchType")));
	assert_true(cJSON_IsString(cJSON_GetObjectItem(resp, "patch")));
	assert_string_equal(cJSON_GetObjectItem(resp, "patchType")->valuestring, "JSONPatch");
	/* The base64 decodes back to exactly the patch webhook_patch builds. */
	struct buf dec;
	buf_init(&dec, 1 << 20);
	assert_int_equal(base64_decode(cJSON_GetObjectItem(resp, "patch")->valuestring, &dec), 0);
	cJSON *pod = J(resource_pod);
	char *want = patch_of(pod, &opts);
	assert_true(want[0]);
	assert_string_equal(buf_cstr(&dec), want);
	assert_int_equal(apply(pod, buf_cstr(&dec)), 0);
	assert_all_env(ctr(pod, "containers", 0));
	free(want);
	buf_release(&dec);
	cJSON_Delete(pod);
	cJSON_Delete(r.json);
	free(body);

	/* A claim-only pod named by generateName. */
	body = review("u-2", "CREATE", "{'apiVersion':'v1','kind':'Pod','metadata':{'generateName':'train-','namespace':'ml',"
				       "'annotations':{'gpu.scheduling/claim':'pair'}},'spec':{'containers':[{'name':'c','image':'x'}]}}");
	r = call_s(w, body);
	resp = response_of(&r, "u-2");
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(resp, "allowed")));
	buf_init(&dec, 1 << 20);
	assert_int_equal(base64_decode(cJSON_GetObjectItem(resp, "patch")->valuestring, &dec), 0);
	assert_non_null(strstr(buf_cstr(&dec), "gpu.scheduling/claim\":\"1\""));
	buf_release(&dec);
	cJSON_Delete(r.json);
	free(body);
	webhook_free(w);
}

static void test_review_passes_others_unchanged(void **state)
{
	(void)state;
	struct webhook *w = webhook_new(&opts);
	const char *gpu = "{'kind':'Pod','metadata':{'annotations':{'gpu.scheduling/claim':'c'}},'spec':{'containers':[{'name':'a'}]}}";
	/* A plain pod; UPDATE, DELETE and CONNECT of a GPU pod; dry runs are mutated like the real thing. */
	const char *cases[][2] = {
		{ "CREATE", "{'kind':'Pod','metadata':{'name':'web'},'spec':{'containers':[{'name':'a','image':'nginx'}]}}" },
		{ "UPDATE", gpu },
		{ "DELETE", "null" },
		{ "CONNECT", "null" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *body = review("uid-x", cases[i][0], cases[i][1]);
		struct reply r = call_s(w, body);
		assert_allowed_unchanged(&r, "uid-x");
		cJSON_Delete(r.json);
		free(body);
	}
	/* Not a pod (kind Deployment), and a pod subresource (CREATE pods/binding). */
	const char *others[] = {
		"{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'o1','operation':'CREATE',"
		"'kind':{'group':'apps','version':'v1','kind':'Deployment'},'object':{'kind':'Deployment','spec':{}}}}",
		"{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'o1','operation':'CREATE',"
		"'kind':{'group':'','version':'v1','kind':'Binding'},'subResource':'binding','object':{'kind':'Binding'}}}",
		"{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'o1','operation':'CREATE',"
		"'object':{'kind':'ConfigMap','metadata':{'annotations':{'gpu.scheduling/claim':'c'}}}}}",
	};
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		char *body = sq(others[i]);
		struct reply r = call_s(w, body);
		assert_allowed_unchanged(&r, "o1");
		cJSON_Delete(r.json);
		free(body);
	}
	webhook_free(w);
}

static void test_review_malformed(void **state)
{
	(void)state;
	struct webhook *w = webhook_new(&opts);
	/* Not JSON at all: HTTP 400 with a JSON error. */
	const char *not_json[] = { "", "{", "not json", "{\"apiVersion\":", "{} x", "{}{}" };
	for (size_t i = 0; i < sizeof(not_json) / sizeof(not_json[0]); i++) {
		struct reply r = call_s(w, not_json[i]);
		assert_int_equal(r.status, 400);
		assert_non_null(strstr(cJSON_GetObjectItem(r.json, "Error")->valuestring, "not JSON"));
		cJSON_Delete(r.json);
	}
	/* A body with a NUL inside: only body_len counts. */
	struct reply r0 = call(w, "{}\0{}", 5);
	assert_int_equal(r0.status, 400);
	cJSON_Delete(r0.json);

	/* JSON, but not a usable review: HTTP 200, allowed:false, code 400, the uid echoed when known. */
	static const struct {
		const char *body, *uid, *why;
	} cases[] = {
		{ "[1,2]", "", "not a JSON object" },
		{ "\"review\"", "", "not a JSON object" },
		{ "{}", "", "want apiVersion admission.k8s.io/v1 kind AdmissionReview, got (none) (none)" },
		{ "{'apiVersion':'admission.k8s.io/v1beta1','kind':'AdmissionReview','request':{'uid':'b1','operation':'CREATE'}}", "b1", "got admission.k8s.io/v1beta1 AdmissionReview" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'Pod','request':{'uid':'b2'}}", "b2", "got admission.k8s.io/v1 Pod" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview'}", "", "no request object" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':[]}", "", "no request object" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'operation':'CREATE'}}", "", "request.uid is missing" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'','operation':'CREATE'}}", "", "request.uid is missing" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':42,'operation':'CREATE'}}", "", "request.uid is missing" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'b3'}}", "b3", "request.operation is missing" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'b4','operation':'CREATE',"
		  "'kind':{'kind':'Pod'}}}", "b4", "request.object is missing" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'b5','operation':'CREATE',"
		  "'kind':{'kind':'Pod'},'object':'pod'}}", "b5", "request.object is missing or not an object" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'b6','operation':'CREATE',"
		  "'kind':{'kind':'Pod'},'object':{'kind':'Service','spec':{}}}}", "b6", "request.object is a Service, not a Pod" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'b7','operation':'CREATE',"
		  "'kind':{'kind':'Pod'},'object':{'kind':'Pod','metadata':{}}}}", "b7", "no spec.containers list" },
		{ "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'b8','operation':'CREATE',"
		  "'object':{'kind':'Pod','metadata':{'annotations':{'gpu.scheduling/claim':'c'}},"
		  "'spec':{'containers':[{'name':'a','env':'x'}]}}}}", "b8", "request.object: spec.containers[0].env is not a list" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *body = sq(cases[i].body);
		struct reply r = call_s(w, body);
		assert_denied(&r, cases[i].uid, cases[i].why);
		cJSON_Delete(r.json);
		free(body);
	}
	/* And the next request is served as usual. */
	char *body = review("after", "CREATE", resource_pod);
	struct reply r = call_s(w, body);
	const cJSON *resp = response_of(&r, "after");
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(resp, "allowed")));
	assert_non_null(cJSON_GetObjectItem(resp, "patch"));
	cJSON_Delete(r.json);
	free(body);
	webhook_free(w);
}

static void test_uid_echo_is_escaped(void **state)
{
	(void)state;
	struct webhook *w = webhook_new(&opts);
	const char *body = "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{"
			   "\"uid\":\"a\\\"b\\\\c\\u00e9\",\"operation\":\"DELETE\",\"object\":null}}";
	struct reply r = call_s(w, body);
	assert_allowed_unchanged(&r, "a\"b\\c\xc3\xa9");
	cJSON_Delete(r.json);
	webhook_free(w);
}

static void test_options_are_copied(void **state)
{
	(void)state;
	struct api_resources *mine = malloc(sizeof(*mine));
	api_resources_default(mine);
	char *marker = strdup("example.com/marker");
	struct webhook_opts o = { .res = mine, .marker_resource = marker };
	struct webhook *w = webhook_new(&o);
	memset(mine, 0, sizeof(*mine));
	free(mine);
	memset(marker, 'x', strlen(marker));
	free(marker);
	char *body = review("c1", "CREATE", "{'metadata':{'annotations':{'gpu.scheduling/claim':'c'}},'spec':{'containers':[{'name':'a'}]}}");
	struct reply r = call_s(w, body);
	const cJSON *resp = response_of(&r, "c1");
	struct buf dec;
	buf_init(&dec, 1 << 20);
	assert_int_equal(base64_decode(cJSON_GetObjectItem(resp, "patch")->valuestring, &dec), 0);
	assert_non_null(strstr(buf_cstr(&dec), "\"limits\":{\"example.com/marker\":\"1\"}"));
	buf_release(&dec);
	cJSON_Delete(r.json);
	free(body);
	body = review("c2", "CREATE", "{'metadata':{},'spec':{'containers':[{'name':'a','resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]}}");
	r = call_s(w, body);
	assert_non_null(cJSON_GetObjectItem(response_of(&r, "c2"), "patch"));
	cJSON_Delete(r.json);
	free(body);
	webhook_free(w);
	webhook_free(NULL);
}


/* ---- shares, claims, and the device plugin's nodes -------------------------- */

static void test_share_containers_get_share_slots(void **state)
{
	(void)state;
	cJSON *pod = J("{'metadata':{'name':'s'},'spec':{'containers':["
		       "{'name':'legacy','resources':{'limits':{'gpu.scheduling/gpu':'2','gpu.scheduling/gpu-memory':'4096'},"
		       "'requests':{'gpu.scheduling/gpu':'2'}}},"
		       "{'name':'plain','resources':{'requests':{'gpu.scheduling/gpu-core':'30'}}},"
		       "{'name':'done','resources':{'limits':{'gpu.scheduling/gpu-share':'1','gpu.scheduling/gpu-core':'20'},"
		       "'requests':{'gpu.scheduling/gpu-share':'1'}}},"
		       "{'name':'whole','resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]}}");
	assert_true(mutate(pod) > 0);
	const cJSON *legacy = ctr(pod, "containers", 0), *plain = ctr(pod, "containers", 1);
	/* gpu turned into gpu-share, in limits and requests; memory stays */
	assert_string_equal(quantity(legacy, "limits", "gpu.scheduling/gpu-share"), "2");
	assert_string_equal(quantity(legacy, "requests", "gpu.scheduling/gpu-share"), "2");
	assert_null(quantity(legacy, "limits", "gpu.scheduling/gpu"));
	assert_null(quantity(legacy, "requests", "gpu.scheduling/gpu"));
	assert_string_equal(quantity(legacy, "limits", "gpu.scheduling/gpu-memory"), "4096");
	/* a share with no count spans one GPU; a limits map is made */
	assert_string_equal(quantity(plain, "limits", "gpu.scheduling/gpu-share"), "1");
	assert_string_equal(quantity(plain, "requests", "gpu.scheduling/gpu-share"), "1");
	/* already right, and a whole-GPU container: untouched */
	assert_int_equal(cJSON_GetArraySize(api_path(ctr(pod, "containers", 2), "resources.limits")), 2);
	assert_string_equal(quantity(ctr(pod, "containers", 3), "limits", "gpu.scheduling/gpu"), "1");
	assert_null(quantity(ctr(pod, "containers", 3), "limits", "gpu.scheduling/gpu-share"));
	assert_int_equal(mutate(pod), 0);
	cJSON_Delete(pod);
}

/* A GpuClaim reader for the tests: "pair" is 2 exclusive GPUs, "slice" one shared, others unknown. */
static int claims_of(void *ctx, const char *ns, const char *name, struct claim *out)
{
	(void)ctx;
	assert_string_equal(ns, "ml");
	if (!strcmp(name, "pair")) {
		out->mode = CLAIM_EXCLUSIVE;
		out->count = 2;
	} else if (!strcmp(name, "slice")) {
		out->mode = CLAIM_SHARED;
		out->count = 1;
		out->mem_mib = 1024;
	} else {
		return -1;
	}
	return 0;
}

static void test_claim_only_pod_gets_the_claims_count(void **state)
{
	(void)state;
	struct webhook_opts o = opts;
	o.claim_of = claims_of;
	const struct {
		const char *claim, *resource, *count;
	} cases[] = {
		{ "pair", "gpu.scheduling/gpu", "2" },
		{ "slice", "gpu.scheduling/gpu-share", "1" },
		{ "unknown", "gpu.scheduling/claim", "1" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[256];
		snprintf(text, sizeof(text), "{'metadata':{'namespace':'ml','annotations':{'gpu.scheduling/claim':'%s'}},"
			 "'spec':{'containers':[{'name':'a'},{'name':'b'}]}}", cases[i].claim);
		cJSON *pod = J(text);
		char *patch = patch_of(pod, &o);
		assert_int_equal(apply(pod, patch), 0);
		free(patch);
		assert_string_equal(quantity(ctr(pod, "containers", 0), "limits", cases[i].resource), cases[i].count);
		assert_string_equal(quantity(ctr(pod, "containers", 0), "requests", cases[i].resource), cases[i].count);
		assert_null(api_path(ctr(pod, "containers", 1), "resources"));
		/* reinvoked: the count is a GPU resource now, nothing more is added */
		patch = patch_of(pod, &o);
		assert_string_equal(patch, "");
		free(patch);
		cJSON_Delete(pod);
	}
}

static void test_no_env_with_the_device_plugin(void **state)
{
	(void)state;
	struct webhook_opts o = opts;
	o.no_env = true;
	cJSON *pod = J(resource_pod);
	char *patch = patch_of(pod, &o);
	assert_null(strstr(patch, "VISIBLE_DEVICES"));
	assert_non_null(strstr(patch, "gpu.scheduling~1managed"));
	free(patch);
	cJSON_Delete(pod);
}

/* ---- the bypass --------------------------------------------------------------- */

/* webhook_bypass of pod (and old, for an UPDATE) in namespace ns: "" when allowed, else the reason. */
static const char *bypass(const char *pod_text, const char *old_text, const char *ns)
{
	static char why[512];
	cJSON *pod = J(pod_text), *old = old_text ? J(old_text) : NULL;
	why[0] = '\0';
	int rc = webhook_bypass(pod, old, ns, &opts, why, sizeof(why));
	assert_int_equal(rc, why[0] != '\0');
	cJSON_Delete(pod);
	cJSON_Delete(old);
	return why;
}

#define POD_ENV(list, env, priv) \
	"{'metadata':{'name':'p'},'spec':{'" list "':[{'name':'c','env':[" env "]" priv "}]}}"
#define PRIV ",'securityContext':{'privileged':true}"

static void test_pods_that_select_gpus_are_refused(void **state)
{
	(void)state;
	static const char *const vars[] = { "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
					    "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK" };
	static const char *const lists[] = { "containers", "initContainers", "ephemeralContainers" };
	for (size_t v = 0; v < 6; v++) {
		for (size_t l = 0; l < 3; l++) {
			char text[512];
			snprintf(text, sizeof(text), "{'metadata':{},'spec':{'%s':[{'name':'c%zu','env':[{'name':'X','value':'1'},"
				 "{'name':'%s','value':'all'}]}]}}", lists[l], l, vars[v]);
			const char *why = bypass(text, NULL, "ml");
			char want[128];
			snprintf(want, sizeof(want), "container c%zu sets %s itself", l, vars[v]);
			if (!strstr(why, want))
				fail_msg("'%s' does not say '%s'", why, want);
			assert_non_null(strstr(why, "ask for gpu.scheduling/gpu"));
		}
	}
	/* A reference to some other annotation (the pod's own claim name, say) is not the webhook's. */
	assert_non_null(strstr(bypass(POD_ENV("containers", "{'name':'NVIDIA_VISIBLE_DEVICES','valueFrom':{'fieldRef':"
		"{'fieldPath':'metadata.annotations[\\u0027gpu.scheduling/claim\\u0027]'}}}", ""), NULL, "ml"),
		"sets NVIDIA_VISIBLE_DEVICES itself"));
	/* ... nor the right annotation for another variable. */
	assert_non_null(strstr(bypass(POD_ENV("containers", "{'name':'NVIDIA_VISIBLE_DEVICES','valueFrom':{'fieldRef':"
		"{'fieldPath':'metadata.annotations[\\u0027gpu.scheduling/rocr-visible-devices\\u0027]'}}}", ""), NULL, "ml"),
		"sets NVIDIA_VISIBLE_DEVICES itself"));
	/* The webhook's own entry passes (it runs before the policy sees the pod). */
	assert_string_equal(bypass(POD_ENV("containers", "{'name':'NVIDIA_VISIBLE_DEVICES','valueFrom':{'fieldRef':"
		"{'fieldPath':'metadata.annotations[\\u0027gpu.scheduling/nvidia-visible-devices\\u0027]'}}}", ""), NULL, "ml"), "");
	/* A CDI annotation, and an allocation preset at CREATE. */
	assert_non_null(strstr(bypass("{'metadata':{'annotations':{'cdi.k8s.io/x':'nvidia.com/gpu=all'}},'spec':{'containers':[]}}",
		NULL, "ml"), "annotation cdi.k8s.io/x asks the runtime for CDI devices"));
	assert_non_null(strstr(bypass("{'metadata':{'annotations':{'gpu.scheduling/allocated':'n:0,1'}},'spec':{'containers':[]}}",
		NULL, "ml"), "gpu.scheduling/allocated is written by the gpu-scheduler's binding only"));
	assert_non_null(strstr(bypass("{'metadata':{'annotations':{'gpu.scheduling/device-uuids':''}},'spec':{'containers':[]}}",
		NULL, "ml"), "gpu.scheduling/device-uuids is written by"));
	/* Harmless pods and variables. */
	assert_string_equal(bypass(POD_ENV("containers", "{'name':'NVIDIA_DRIVER_CAPABILITIES','value':'all'}", ""), NULL, "ml"), "");
	assert_string_equal(bypass("{'metadata':{'annotations':{'gpu.scheduling/claim':'c'}},'spec':{'containers':[{'name':'a'}]}}",
		NULL, "ml"), "");
}

static void test_bypass_exemptions_and_updates(void **state)
{
	(void)state;
	const char *all = "{'name':'NVIDIA_VISIBLE_DEVICES','value':'all'}";
	char priv[512], plain[512];
	snprintf(priv, sizeof(priv), POD_ENV("containers", "%s", PRIV), all);
	snprintf(plain, sizeof(plain), POD_ENV("containers", "%s", ""), all);
	/* privileged in an allow-listed namespace: exempt; anything less is not */
	opts.system_namespaces = "kube-system, gpu-system";
	assert_string_equal(bypass(priv, NULL, "gpu-system"), "");
	assert_string_equal(bypass(priv, NULL, "kube-system"), "");
	assert_string_not_equal(bypass(plain, NULL, "kube-system"), "");
	assert_string_not_equal(bypass(priv, NULL, "ml"), "");
	assert_string_not_equal(bypass(priv, NULL, "gpu"), "");          /* a prefix of a listed name */
	opts.system_namespaces = NULL;
	assert_string_not_equal(bypass(priv, NULL, "kube-system"), "");

	/* UPDATE: the binding's annotations may stay, not change; nor may a CDI annotation appear. */
	const char *bound = "{'metadata':{'annotations':{'gpu.scheduling/allocated':'n:0','x':'1'}},'spec':{'containers':[]}}";
	const char *relabelled = "{'metadata':{'labels':{'a':'b'},'annotations':{'gpu.scheduling/allocated':'n:0','x':'2'}},"
				 "'spec':{'containers':[]}}";
	assert_string_equal(bypass(relabelled, bound, "ml"), "");
	assert_non_null(strstr(bypass("{'metadata':{'annotations':{'gpu.scheduling/allocated':'n:1'}},'spec':{'containers':[]}}",
		bound, "ml"), "gpu.scheduling/allocated"));
	assert_non_null(strstr(bypass("{'metadata':{},'spec':{'containers':[]}}", bound, "ml"), "gpu.scheduling/allocated"));
	assert_non_null(strstr(bypass("{'metadata':{'annotations':{'gpu.scheduling/allocated':'n:0','cdi.k8s.io/a':'v'}},"
		"'spec':{'containers':[]}}", bound, "ml"), "cdi.k8s.io/a"));
	/* The pod's namespace comes from the pod when the review does not say. */
	opts.system_namespaces = "kube-system";
	assert_string_equal(bypass("{'metadata':{'namespace':'kube-system'},'spec':{'containers':[{'name':'c','env':[{'name':"
		"'CUDA_VISIBLE_DEVICES','value':'0'}]" PRIV "}]}}", NULL, NULL), "");
}

/* A pod (CREATE) whose container of list mounts at path, or with a hostPath volume at path. */
static const char *mount_at(const char *list, const char *path, const char *ns, const char *priv)
{
	char text[1024];
	snprintf(text, sizeof(text), "{'metadata':{},'spec':{'volumes':[{'name':'v','emptyDir':{}}],'%s':[{'name':'c',"
		 "'volumeMounts':[{'name':'v','mountPath':'/data'},{'name':'v','mountPath':'%s'}]%s}]}}", list, path, priv);
	return bypass(text, NULL, ns);
}

static const char *host_path(const char *path, const char *ns, const char *priv)
{
	char text[1024];
	snprintf(text, sizeof(text), "{'metadata':{},'spec':{'volumes':[{'name':'o','emptyDir':{}},{'name':'h','hostPath':"
		 "{'path':'%s'}}],'containers':[{'name':'c','volumeMounts':[{'name':'h','mountPath':'/h'}]%s}]}}", path, priv);
	return bypass(text, NULL, ns);
}

#define assert_says(why, want) do { \
	const char *w_ = (why); \
	if (!strstr(w_, (want))) \
		fail_msg("'%s' does not say '%s'", w_, (want)); \
} while (0)

/* The NVIDIA runtime reads mounts under its device-list directory as device names (volume-mounts strategy). */
static void test_device_list_mounts_are_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"/var/run/nvidia-container-devices/all", "/var/run/nvidia-container-devices",
		"/var/run/nvidia-container-devices/", "//var//run/./nvidia-container-devices/GPU-1",
		"/run/nvidia-container-devices/0", "var/run/nvidia-container-devices/all",
		"/x/../var/run/nvidia-container-devices/all",
	};
	static const char *const lists[] = { "containers", "initContainers", "ephemeralContainers" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		for (size_t l = 0; l < 3; l++) {
			const char *why = mount_at(lists[l], bad[i], "ml", "");
			assert_says(why, "container c mounts a volume at ");
			assert_says(why, "the NVIDIA runtime's device list");
		}
	static const char *const fine[] = { "/var/run/nvidia-container-devices-x", "/var/run", "/run", "/data/x",
					    "/var/run/nvidia", "/nvidia-container-devices" };
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
		assert_string_equal(mount_at("containers", fine[i], "ml", ""), "");
	/* An ephemeral container added later is checked too; the others cannot change after CREATE. */
	const char *old = "{'metadata':{},'spec':{'containers':[{'name':'a'}]}}";
	assert_says(bypass("{'metadata':{},'spec':{'containers':[{'name':'a'}],'ephemeralContainers':[{'name':'dbg',"
		"'volumeMounts':[{'name':'v','mountPath':'/var/run/nvidia-container-devices/all'}]}]}}", old, "ml"),
		"container dbg mounts a volume at /var/run/nvidia-container-devices/all");
	/* A path too long to normalise is refused, not let through. */
	char *lng = malloc(6000);
	assert_non_null(lng);
	int k = snprintf(lng, 6000, "{'metadata':{},'spec':{'containers':[{'name':'c','volumeMounts':[{'name':'v','mountPath':'/");
	memset(lng + k, 'a', 5000);
	snprintf(lng + k + 5000, 6000 - (size_t)k - 5000, "'}]}]}}");
	assert_says(bypass(lng, NULL, "ml"), "container c mounts a volume at /aaa");
	free(lng);
	/* privileged in an allow-listed namespace: exempt */
	opts.system_namespaces = "kube-system";
	assert_string_equal(mount_at("containers", bad[0], "kube-system", PRIV), "");
	assert_string_not_equal(mount_at("containers", bad[0], "kube-system", ""), "");
	assert_string_not_equal(mount_at("containers", bad[0], "ml", PRIV), "");
}

static void test_gpu_host_paths_are_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"/dev/nvidia0", "/dev/nvidia0/", "/dev//nvidia0", "/dev/./nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm",
		"/dev/nvidia-caps/nvidia-cap1", "/dev", "/dev/", "/", "//", "/dev/dri", "/dev/dri/renderD128",
		"/dev/dri/by-path/pci-0000:00:02.0-card", "/dev/kfd", "/dev/accel", "/dev/accel/accel0", "/dev/accel0",
		"/dev/char/195:0", "/var/run/nvidia-container-devices", "/run/nvidia-container-devices/all",
		"/proc/1/root", "/proc/self/root/dev/nvidia0", "/proc/42/fd/3", "/proc/1/cwd", "/dev/../dev/nvidia0",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *why = host_path(bad[i], "ml", "");
		assert_says(why, "volume h is hostPath ");
		assert_says(why, "GPU device");
	}
	static const char *const fine[] = { "/dev/null", "/dev/shm", "/dev/fuse", "/var/log", "/data/nvidia0", "/devices",
					    "/proc/meminfo", "/proc", "/var/run", "/run/containerd" };
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		const char *why = host_path(fine[i], "ml", "");
		if (why[0])
			fail_msg("hostPath %s refused: %s", fine[i], why);
	}
	opts.system_namespaces = "gpu-system";
	assert_string_equal(host_path("/dev/nvidia0", "gpu-system", PRIV), "");
	assert_string_not_equal(host_path("/dev/nvidia0", "gpu-system", ""), "");
	/* volumes cannot change after CREATE: an UPDATE does not judge them again */
	const char *pod = "{'metadata':{},'spec':{'volumes':[{'name':'h','hostPath':{'path':'/dev/nvidia0'}}],"
			  "'containers':[{'name':'a'}]}}";
	assert_string_equal(bypass(pod, pod, "ml"), "");
}

/* webhook_protect as user: "" when allowed, else the reason. */
static const char *protect(const char *pod_text, const char *old_text, const char *user)
{
	static char why[512];
	cJSON *pod = J(pod_text), *old = old_text ? J(old_text) : NULL;
	why[0] = '\0';
	int rc = webhook_protect(pod, old, user, &opts, why, sizeof(why));
	assert_int_equal(rc, why[0] != '\0');
	cJSON_Delete(pod);
	cJSON_Delete(old);
	return why;
}

#define EXTENDER_SA "system:serviceaccount:gpu-system:gpu-extender"

static void test_node_name_gpu_pods_are_refused(void **state)
{
	(void)state;
	static const char *const asks[] = {
		"'containers':[{'name':'c','resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]",
		"'containers':[{'name':'c','resources':{'requests':{'gpu.scheduling/gpu-share':'1'}}}]",
		"'containers':[{'name':'c'}],'initContainers':[{'name':'i','resources':{'limits':{'gpu.scheduling/gpu-memory':'1024'}}}]",
		"'containers':[{'name':'c','resources':{'limits':{'gpu.scheduling/gpu-core':'10'}}}]",
		"'containers':[{'name':'c','resources':{'limits':{'gpu.scheduling/claim':'1'}}}]",
	};
	char text[1024];
	for (size_t i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
		snprintf(text, sizeof(text), "{'metadata':{},'spec':{'nodeName':'n1',%s}}", asks[i]);
		const char *why = protect(text, NULL, "alice");
		assert_says(why, "spec.nodeName n1");
		assert_says(why, "skips the scheduler");
		/* without nodeName: the scheduler's business */
		snprintf(text, sizeof(text), "{'metadata':{},'spec':{%s}}", asks[i]);
		assert_string_equal(protect(text, NULL, "alice"), "");
	}
	assert_says(protect("{'metadata':{'annotations':{'gpu.scheduling/claim':'c'}},'spec':{'nodeName':'n1',"
			    "'containers':[{'name':'c'}]}}", NULL, "alice"), "spec.nodeName n1");
	assert_string_equal(protect("{'metadata':{},'spec':{'nodeName':'n1','containers':[{'name':'c',"
				    "'resources':{'limits':{'cpu':'1'}}}]}}", NULL, "alice"), "");
	assert_string_equal(protect("{'metadata':{},'spec':{'nodeName':'','containers':[{'name':'c',"
				    "'resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]}}", NULL, "alice"), "");
	/* A static pod's mirror, written by its node, shows what runs there anyway; anyone else's is refused. */
	const char *mirror = "{'metadata':{'annotations':{'kubernetes.io/config.mirror':'h'}},'spec':{'nodeName':'n1',"
			     "'containers':[{'name':'c','resources':{'limits':{'gpu.scheduling/gpu':'1'}}}]}}";
	assert_string_equal(protect(mirror, NULL, "system:node:n1"), "");
	assert_string_not_equal(protect(mirror, NULL, "alice"), "");
}

static void test_protected_labels_and_annotations(void **state)
{
	(void)state;
	const char *managed = "{'metadata':{'labels':{'gpu.scheduling/managed':'true','app':'a',"
			      "'scheduling.x-k8s.io/pod-group':'g'},'annotations':{'gpu.scheduling/claim':'c',"
			      "'gpu.scheduling/policy':'fgd','note':'1'}},'spec':{'containers':[]}}";
	static const struct {
		const char *pod, *key;
	} changes[] = {
		{ "{'metadata':{'labels':{'app':'a','scheduling.x-k8s.io/pod-group':'g'},'annotations':{'gpu.scheduling/claim':'c',"
		  "'gpu.scheduling/policy':'fgd','note':'1'}},'spec':{'containers':[]}}", "label gpu.scheduling/managed" },
		{ "{'metadata':{'labels':{'gpu.scheduling/managed':'false','app':'a','scheduling.x-k8s.io/pod-group':'g'},"
		  "'annotations':{'gpu.scheduling/claim':'c','gpu.scheduling/policy':'fgd','note':'1'}},'spec':{'containers':[]}}",
		  "label gpu.scheduling/managed" },
		{ "{'metadata':{'labels':{'gpu.scheduling/managed':'true','app':'a','scheduling.x-k8s.io/pod-group':'h'},"
		  "'annotations':{'gpu.scheduling/claim':'c','gpu.scheduling/policy':'fgd','note':'1'}},'spec':{'containers':[]}}",
		  "label scheduling.x-k8s.io/pod-group" },
		{ "{'metadata':{'labels':{'gpu.scheduling/managed':'true','app':'a','scheduling.x-k8s.io/pod-group':'g'},"
		  "'annotations':{'gpu.scheduling/policy':'fgd','note':'1'}},'spec':{'containers':[]}}",
		  "annotation gpu.scheduling/claim" },
		{ "{'metadata':{'labels':{'gpu.scheduling/managed':'true','app':'a','scheduling.x-k8s.io/pod-group':'g'},"
		  "'annotations':{'gpu.scheduling/claim':'d','gpu.scheduling/policy':'fgd','note':'1'}},'spec':{'containers':[]}}",
		  "annotation gpu.scheduling/claim" },
		{ "{'metadata':{'labels':{'gpu.scheduling/managed':'true','app':'a','scheduling.x-k8s.io/pod-group':'g'},"
		  "'annotations':{'gpu.scheduling/claim':'c','gpu.scheduling/policy':'best-fit','note':'1'}},'spec':{'containers':[]}}",
		  "annotation gpu.scheduling/policy" },
	};
	for (size_t i = 0; i < sizeof(changes) / sizeof(changes[0]); i++) {
		const char *why = protect(changes[i].pod, managed, "alice");
		assert_says(why, changes[i].key);
		assert_says(why, "cannot change after the pod is created");
		assert_string_equal(protect(changes[i].pod, managed, EXTENDER_SA), "");
	}
	/* Adding what was never there: the pod-group label and the claim change the gang and the claim ... */
	const char *bare = "{'metadata':{},'spec':{'containers':[]}}";
	assert_says(protect("{'metadata':{'labels':{'scheduling.x-k8s.io/pod-group':'g'}},'spec':{'containers':[]}}",
			    bare, "alice"), "label scheduling.x-k8s.io/pod-group");
	assert_says(protect("{'metadata':{'annotations':{'gpu.scheduling/claim':'c'}},'spec':{'containers':[]}}",
			    bare, "alice"), "annotation gpu.scheduling/claim");
	/* ... the managed label set to true on a pod without it only lets the extender follow it. */
	assert_string_equal(protect("{'metadata':{'labels':{'gpu.scheduling/managed':'true'}},'spec':{'containers':[]}}",
				    bare, "alice"), "");
	assert_string_not_equal(protect("{'metadata':{'labels':{'gpu.scheduling/managed':'yes'}},'spec':{'containers':[]}}",
					bare, "alice"), "");
	/* Other labels and annotations change freely; the same pod again passes; a CREATE is not an edit. */
	assert_string_equal(protect("{'metadata':{'labels':{'gpu.scheduling/managed':'true','app':'b',"
				    "'scheduling.x-k8s.io/pod-group':'g'},'annotations':{'gpu.scheduling/claim':'c',"
				    "'gpu.scheduling/policy':'fgd','note':'2'}},'spec':{'containers':[]}}", managed, "alice"), "");
	assert_string_equal(protect(managed, managed, NULL), "");
	assert_string_equal(protect(managed, NULL, "alice"), "");
	/* Another service account of the same name elsewhere is not the extender. */
	assert_string_not_equal(protect(bare, managed, "system:serviceaccount:ml:gpu-extender"), "");
}

static void test_review_refuses_a_bypass(void **state)
{
	(void)state;
	struct webhook *w = webhook_new(&opts);
	/* CREATE, an UPDATE that adds a CDI annotation, and an ephemeral container with the variable */
	const struct {
		const char *op, *sub, *object, *old, *why;
	} cases[] = {
		{ "CREATE", NULL, POD_ENV("containers", "{'name':'NVIDIA_VISIBLE_DEVICES','value':'all'}", ""), "null",
		  "container c sets NVIDIA_VISIBLE_DEVICES itself" },
		{ "UPDATE", NULL, "{'kind':'Pod','metadata':{'annotations':{'cdi.k8s.io/g':'gpu.scheduling/gpu=GPU-1'}},'spec':{'containers':[]}}",
		  "{'kind':'Pod','metadata':{},'spec':{'containers':[]}}", "cdi.k8s.io/g" },
		{ "UPDATE", "ephemeralcontainers", POD_ENV("ephemeralContainers", "{'name':'CUDA_VISIBLE_DEVICES','value':'0'}", ""),
		  "{'kind':'Pod','metadata':{'name':'p'},'spec':{'containers':[]}}", "container c sets CUDA_VISIBLE_DEVICES itself" },
		{ "UPDATE", NULL, "{'kind':'Pod','metadata':{'labels':{}},'spec':{'containers':[]}}",
		  "{'kind':'Pod','metadata':{'labels':{'gpu.scheduling/managed':'true'}},'spec':{'containers':[]}}",
		  "label gpu.scheduling/managed cannot change" },
		{ "CREATE", NULL, "{'kind':'Pod','metadata':{},'spec':{'nodeName':'n','containers':[{'name':'c','resources':"
		  "{'limits':{'gpu.scheduling/gpu':'1'}}}]}}", "null", "spec.nodeName n" },
		{ "CREATE", NULL, "{'kind':'Pod','metadata':{},'spec':{'volumes':[{'name':'d','hostPath':{'path':'/dev/nvidia0'}}],"
		  "'containers':[{'name':'c'}]}}", "null", "volume d is hostPath /dev/nvidia0" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *obj = sq(cases[i].object), *old = sq(cases[i].old);
		struct buf b;
		buf_init(&b, 1 << 20);
		buf_printf(&b, "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{"
			       "\"uid\":\"r%zu\",\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"},\"namespace\":\"ml\","
			       "%s%s%s\"operation\":\"%s\",\"userInfo\":{\"username\":\"alice\"},\"object\":%s,"
			       "\"oldObject\":%s}}", i,
			   cases[i].sub ? "\"subResource\":\"" : "", cases[i].sub ? cases[i].sub : "", cases[i].sub ? "\"," : "",
			   cases[i].op, obj, old);
		struct reply r = call_s(w, buf_cstr(&b));
		char uid[8];
		snprintf(uid, sizeof(uid), "r%zu", i);
		const cJSON *resp = response_of(&r, uid);
		assert_true(cJSON_IsFalse(cJSON_GetObjectItem(resp, "allowed")));
		assert_null(cJSON_GetObjectItem(resp, "patch"));
		assert_int_equal(api_path(resp, "status.code")->valueint, 403);
		const char *msg = api_str(api_path(resp, "status"), "message");
		if (!msg || !strstr(msg, cases[i].why))
			fail_msg("message '%s' does not say '%s'", msg ? msg : "(none)", cases[i].why);
		cJSON_Delete(r.json);
		buf_release(&b);
		free(obj);
		free(old);
	}
	webhook_free(w);
}

int main(void)
{
	log_setup(LOG_ERROR, false);
	jsonarena_install();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_resource_pod, setup),
		cmocka_unit_test_setup(test_which_resources_count, setup),
		cmocka_unit_test_setup(test_claim_only_pod_no_labels, setup),
		cmocka_unit_test_setup(test_claim_only_pod_labels_present, setup),
		cmocka_unit_test_setup(test_pointer_escaping, setup),
		cmocka_unit_test_setup(test_other_pods_untouched, setup),
		cmocka_unit_test_setup(test_malformed_pods, setup),
		cmocka_unit_test_setup(test_many_containers, setup),
		cmocka_unit_test_setup(test_review_gpu_pod, setup),
		cmocka_unit_test_setup(test_review_passes_others_unchanged, setup),
		cmocka_unit_test_setup(test_review_malformed, setup),
		cmocka_unit_test_setup(test_uid_echo_is_escaped, setup),
		cmocka_unit_test_setup(test_options_are_copied, setup),
		cmocka_unit_test_setup(test_share_containers_get_share_slots, setup),
		cmocka_unit_test_setup(test_claim_only_pod_gets_the_claims_count, setup),
		cmocka_unit_test_setup(test_no_env_with_the_device_plugin, setup),
		cmocka_unit_test_setup(test_pods_that_select_gpus_are_refused, setup),
		cmocka_unit_test_setup(test_bypass_exemptions_and_updates, setup),
		cmocka_unit_test_setup(test_device_list_mounts_are_refused, setup),
		cmocka_unit_test_setup(test_gpu_host_paths_are_refused, setup),
		cmocka_unit_test_setup(test_node_name_gpu_pods_are_refused, setup),
		cmocka_unit_test_setup(test_protected_labels_and_annotations, setup),
		cmocka_unit_test_setup(test_review_refuses_a_bypass, setup),
	};
	return cmocka_run_group_tests_name("webhook", tests, NULL, NULL);
}
