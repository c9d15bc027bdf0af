/*
 * The vendor table (vendor.h): every entry complete, its names unique, the
 * names the product used before the table existed kept, and for each entry
 * the webhook and the device plugin doing what the entry says, read from
 * the table, so a new entry is checked without a test of its own.
 */
#include "testutil.h"

#include "api.h"
#include "buf.h"
#include "devplugin.h"
#include "vendor.h"
#include "webhook.h"

#include "detect.h"

#include <stdio.h>
#include <stdlib.h>

#define EACH_VENDOR(v) \
	for (const struct vendor *v = vendor_get(GPU_VENDOR_NVIDIA); v; v = vendor_get((enum gpu_vendor)(v->id + 1)))

static int count_of(const char *const *list)
{
	int n = 0;
	while (list[n])
		n++;
	return n;
}

static bool in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (!strcmp(*list, s))
			return true;
	return false;
}

/* ---- the table itself ---- */

static void test_every_entry_complete(void **state)
{
	(void)state;
	int n = 0;
	assert_null(vendor_get(GPU_VENDOR_ANY));
	assert_null(vendor_get((enum gpu_vendor)(VENDOR_COUNT + 1)));
	assert_null(vendor_get((enum gpu_vendor)-1));
	EACH_VENDOR(v) {
		n++;
		assert_int_equal(v->id, n);                     /* entry k is enum value k + 1 */
		assert_non_null(v->name);
		assert_true(v->name[0] != '\0');
		for (const char *c = v->name; *c; c++)         /* a GpuClaim and a label value spell it */
			assert_true((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9'));
		assert_non_null(v->title);
		assert_true(v->title[0] != '\0');
		assert_string_equal(gpu_vendor_name(v->id), v->name);
		enum gpu_vendor back = GPU_VENDOR_ANY;
		assert_true(gpu_vendor_parse(v->title, &back));
		assert_int_equal(back, v->id);

		/* the binding's lists: each variable from an annotation of the product's group */
		int nenv = 0;
		for (const struct vendor_env *e = v->env; e->name; e++, nenv++) {
			assert_non_null(e->annotation);
			assert_int_equal(strncmp(e->annotation, API_GROUP "/", strlen(API_GROUP) + 1), 0);
			assert_int_equal(e->vendor, v->id);
			/* a pod may not set a variable the webhook injects */
			assert_true(in_list(v->selecting_env, e->name));
		}
		assert_true(nenv >= 1 && nenv <= VENDOR_MAX_ENV);
		assert_true(v->naming == VENDOR_NAME_UUID || v->naming == VENDOR_NAME_INDEX);
		assert_true(count_of(v->selecting_env) >= 1 && count_of(v->selecting_env) <= VENDOR_MAX_ENV);

		/* the device plugin */
		assert_true(v->devfile == VENDOR_DEV_DRI || v->devfile == VENDOR_DEV_MINOR);
		if (v->devfile == VENDOR_DEV_MINOR) {
			assert_true(v->dev_prefix && !strncmp(v->dev_prefix, "/dev/", 5));
			assert_true(v->minor_dir && v->minor_dir[0] == '/');
			assert_true(v->minor_file && v->minor_key && v->minor_key[0]);
		}
		assert_true(count_of(v->common_files) <= VENDOR_MAX_FILES);
		for (const char *const *f = v->common_files; *f; f++)
			assert_int_equal(strncmp(*f, "/dev/", 5), 0);
		assert_true(!v->required_file || in_list(v->common_files, v->required_file));
		for (const char *const *e = v->plugin_env; *e; e++)
			assert_true(in_list(v->selecting_env, *e));
		assert_non_null(v->runtime_env);
		assert_non_null(v->runtime_off);
		assert_non_null(v->runtime_dir);
		if (v->runtime_env[0]) {
			assert_true(in_list(v->selecting_env, v->runtime_env));
			assert_true(v->runtime_off[0] != '\0');
		}
		assert_true(!v->runtime_dir[0] || (v->runtime_dir[0] == '/' && v->runtime_env[0]));
		/* the plugin writes one CDI spec, of one kind: a kind of its own needs a spec of its own (cdi.c) */
		assert_string_equal(v->cdi_kind, DP_CDI_KIND);

		/* the webhook: the vendor's device files cannot be mounted past the plugin */
		assert_true(count_of(v->host_paths) >= 1 && count_of(v->host_paths) <= VENDOR_MAX_PATHS);
		for (const char *const *p = v->host_paths; *p; p++)
			assert_int_equal(strncmp(*p, "/dev/", 5), 0);
	}
	assert_int_equal(n, VENDOR_COUNT);
	assert_false(gpu_vendor_parse("", &(enum gpu_vendor){ 0 }));
	assert_false(gpu_vendor_parse("nvidia2", &(enum gpu_vendor){ 0 }));
	assert_string_equal(gpu_vendor_name(GPU_VENDOR_ANY), "");
}

static void test_names_unique(void **state)
{
	(void)state;
	const char *seen[64];
	int n = 0;
#define UNIQUE(s)                                                     \
	do {                                                          \
		for (int k_ = 0; k_ < n; k_++)                        \
			if (!strcasecmp(seen[k_], (s)))               \
				fail_msg("\"%s\" named twice", (s)); \
		assert_true(n < 64);                                  \
		seen[n++] = (s);                                      \
	} while (0)
	/* vendor names: parse is case-insensitive */
	EACH_VENDOR(v) UNIQUE(v->name);
	n = 0;
	/* every variable a pod may not set belongs to one vendor */
	EACH_VENDOR(v) for (const char *const *s = v->selecting_env; *s; s++) UNIQUE(*s);
	n = 0;
	/* each annotation feeds one variable; none is an annotation the product uses for something else */
	EACH_VENDOR(v) for (const struct vendor_env *e = v->env; e->name; e++) UNIQUE(e->annotation);
	const char *others[] = { ANN_CLAIM, ANN_POLICY, ANN_ALLOCATED, ANN_UUIDS, ANN_SHARED_MEMORY, ANN_SHARED_CORE };
	for (size_t k = 0; k < sizeof(others) / sizeof(others[0]); k++)
		UNIQUE(others[k]);
	n = 0;
	EACH_VENDOR(v) for (const struct vendor_env *e = v->env; e->name; e++) UNIQUE(e->name);
	n = 0;
	/* the device files every container of a vendor needs: one owner each, and all fit the inventory */
	EACH_VENDOR(v) for (const char *const *f = v->common_files; *f; f++) UNIQUE(*f);
	assert_true(n <= DP_MAX_COMMON);
#undef UNIQUE
}

/* The names the product used before the table: pods, runtimes and docs depend on them. */
static void test_names_as_before(void **state)
{
	(void)state;
	static const char *const env[][2] = {
		{ "CUDA_VISIBLE_DEVICES", ANN_CUDA },
		{ "NVIDIA_VISIBLE_DEVICES", ANN_NVIDIA },
		{ "ROCR_VISIBLE_DEVICES", ANN_ROCR },
		{ "ZE_AFFINITY_MASK", ANN_ZE },
	};
	size_t k = 0;
	for (const struct vendor_env *e; (e = vendor_env_at(k)); k++) {
		assert_true(k < 4);
		assert_string_equal(e->name, env[k][0]);
		assert_string_equal(e->annotation, env[k][1]);
	}
	assert_int_equal(k, 4);
	assert_string_equal(ANN_CUDA, "gpu.scheduling/cuda-visible-devices");
	assert_string_equal(ANN_ZE, "gpu.scheduling/ze-affinity-mask");
	static const char *const selecting[] = { "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
						 "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
						 "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK" };
	int n = 0;
	EACH_VENDOR(v) n += count_of(v->selecting_env);
	assert_int_equal(n, 6);
	for (size_t i = 0; i < 6; i++) {
		bool found = false;
		EACH_VENDOR(v) found |= in_list(v->selecting_env, selecting[i]);
		assert_true(found);
	}
	assert_string_equal(gpu_vendor_name(GPU_VENDOR_NVIDIA), "nvidia");
	assert_string_equal(gpu_vendor_name(GPU_VENDOR_AMD), "amd");
	assert_string_equal(gpu_vendor_name(GPU_VENDOR_INTEL), "intel");
	char names[64];
	vendor_names_list(names, sizeof(names));
	assert_string_equal(names, "nvidia, amd or intel");
	vendor_names_list(names, 10);
	assert_string_equal(names, "nvidia, a");
	assert_int_equal(vendor_get(GPU_VENDOR_INTEL)->naming, VENDOR_NAME_INDEX);
}

/* Every vendor of the table has a detector of its own in the node agent, and its count label. */
static void test_every_vendor_detected(void **state)
{
	(void)state;
	assert_null(detect_vendor_of(GPU_VENDOR_ANY));
	assert_null(detect_vendor_of((enum gpu_vendor)(VENDOR_COUNT + 1)));
	EACH_VENDOR(v) {
		const struct detect_vendor *d = detect_vendor_of(v->id);
		assert_non_null(d);
		assert_int_equal(d->vendor, v->id);
		assert_true(d->work_size > 0);
		assert_true(d->ntools >= 1 && d->ntools <= DETECT_MAX_TOOLS);
		for (int k = 0; k < d->ntools; k++) {
			const struct detect_tool *t = &d->tool[k];
			assert_true(t->run || (t->argv && t->argv[0] && t->parse));
		}
		assert_non_null(d->merge);
		assert_non_null(d->member_gbps);
		assert_true(d->fast_link != AGENT_LINK_UNKNOWN && d->fast_link != AGENT_LINK_SELF &&
			    d->fast_link != AGENT_LINK_PCIE);
		assert_true(d->island_prefix && d->island_prefix[0]);
		EACH_VENDOR(w) if (w->id != v->id) {
			assert_true(d != detect_vendor_of(w->id));
			assert_true(strcmp(d->island_prefix, detect_vendor_of(w->id)->island_prefix) != 0);
		}
		char key[128];
		snprintf(key, sizeof(key), AGENT_LABEL_PREFIX "%s.count", v->name);
		assert_true(agent_label_managed(key));
	}
}

/* ---- the webhook, per entry ---- */

static struct api_resources res;
static struct webhook_opts opts;

enum shape { ENV_POD, MOUNT_POD, HOST_POD };

/* webhook_bypass of a pod that sets env a=b, mounts a volume at a+b, or has a hostPath volume a+b: "" or why. */
static const char *bypass_of(enum shape shape, const char *a, const char *b)
{
	static char why[512];
	char text[2048];
	if (shape == ENV_POD)
		snprintf(text, sizeof(text), "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"c\","
			 "\"env\":[{\"name\":\"%s\",\"value\":\"%s\"}]}]}}", a, b);
	else if (shape == MOUNT_POD)
		snprintf(text, sizeof(text), "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"c\","
			 "\"volumeMounts\":[{\"name\":\"v\",\"mountPath\":\"%s%s\"}]}]}}", a, b);
	else
		snprintf(text, sizeof(text), "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"c\"}],"
			 "\"volumes\":[{\"name\":\"v\",\"hostPath\":{\"path\":\"%s%s\"}}]}}", a, b);
	cJSON *pod = cJSON_Parse(text);
	assert_non_null(pod);
	why[0] = '\0';
	int rc = webhook_bypass(pod, NULL, "ml", &opts, why, sizeof(why));
	assert_int_equal(rc, why[0] != '\0');
	cJSON_Delete(pod);
	return why;
}

static void test_webhook_per_vendor(void **state)
{
	(void)state;
	api_resources_default(&res);
	opts = (struct webhook_opts){ .res = &res, .marker_resource = "gpu.scheduling/claim" };
	assert_string_equal(bypass_of(ENV_POD, "OTHER_VARIABLE", "0"), "");
	assert_string_equal(bypass_of(MOUNT_POD, "/data", ""), "");
	assert_string_equal(bypass_of(HOST_POD, "/data", ""), "");
	EACH_VENDOR(v) {
		for (const char *const *s = v->selecting_env; *s; s++)
			assert_non_null(strstr(bypass_of(ENV_POD, *s, "0"), *s));
		for (const char *const *p = v->host_paths; *p; p++) {
			assert_non_null(strstr(bypass_of(HOST_POD, *p, ""), "hostPath"));
			assert_non_null(strstr(bypass_of(HOST_POD, *p, "0"), "hostPath"));
		}
		for (const char *const *f = v->common_files; *f; f++)
			assert_non_null(strstr(bypass_of(HOST_POD, *f, ""), "hostPath"));
		if (v->runtime_dir[0]) {
			const char *why = bypass_of(MOUNT_POD, v->runtime_dir, "/GPU-1");
			assert_non_null(strstr(why, v->title));
			assert_non_null(strstr(why, v->runtime_dir));
			assert_non_null(strstr(bypass_of(HOST_POD, v->runtime_dir, ""), "hostPath"));
		}
		/* a binding annotation set by the pod itself */
		for (const struct vendor_env *e = v->env; e->name; e++) {
			char text[1024];
			snprintf(text, sizeof(text),
				 "{\"metadata\":{\"name\":\"p\",\"annotations\":{\"%s\":\"0\"}},\"spec\":{\"containers\":[]}}",
				 e->annotation);
			cJSON *pod = cJSON_Parse(text);
			char why[512] = "";
			assert_int_equal(webhook_bypass(pod, NULL, "ml", &opts, why, sizeof(why)), 1);
			assert_non_null(strstr(why, e->annotation));
			cJSON_Delete(pod);
		}
	}
	/* a GPU pod gets every vendor's variables, each a reference to its annotation */
	cJSON *pod = cJSON_Parse("{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":\"c\","
				 "\"resources\":{\"limits\":{\"gpu.scheduling/gpu\":\"1\"}}}]}}");
	struct buf patch;
	buf_init(&patch, 1 << 20);
	char err[256] = "";
	assert_int_equal(webhook_patch(pod, "ml", &opts, &patch, err, sizeof(err)), 0);
	EACH_VENDOR(v) for (const struct vendor_env *e = v->env; e->name; e++) {
		char want[512];
		snprintf(want, sizeof(want), "{\"name\":\"%s\",\"valueFrom\":{\"fieldRef\":{\"apiVersion\":\"v1\","
			 "\"fieldPath\":\"metadata.annotations['%s']\"}}}", e->name, e->annotation);
		assert_non_null(strstr(buf_cstr(&patch), want));
	}
	buf_release(&patch);
	cJSON_Delete(pod);
}

/*
 * The same rules ship as ValidatingAdmissionPolicies (CEL, which cannot
 * read the table): every name and path of every entry must be in them.
 */
static void test_admission_policy_names_every_vendor(void **state)
{
	(void)state;
	FILE *f = fopen("deploy/base/08-admission-policy.yaml", "r");
	assert_non_null(f);
	static char yaml[1 << 18];
	size_t n = fread(yaml, 1, sizeof(yaml) - 1, f);
	fclose(f);
	assert_true(n > 0 && n < sizeof(yaml) - 1);
	yaml[n] = '\0';
	char want[256];
	EACH_VENDOR(v) {
		for (const char *const *s = v->selecting_env; *s; s++) {
			snprintf(want, sizeof(want), "'%s'", *s);
			if (!strstr(yaml, want))
				fail_msg("%s: %s is not in the admission policy", v->name, *s);
		}
		for (const struct vendor_env *e = v->env; e->name; e++) {
			snprintf(want, sizeof(want), "'%s': \"metadata.annotations['%s']\"", e->name, e->annotation);
			if (!strstr(yaml, want))
				fail_msg("%s: %s from %s is not in the admission policy", v->name, e->name, e->annotation);
		}
		for (const char *const *p = v->host_paths; *p; p++) {
			snprintf(want, sizeof(want), "p.startsWith('%s')", *p);
			if (!strstr(yaml, want))
				fail_msg("%s: hostPath %s is not in the admission policy", v->name, *p);
		}
		if (v->runtime_dir[0]) {
			snprintf(want, sizeof(want), "p.startsWith('%s/')", v->runtime_dir);
			if (!strstr(yaml, want))
				fail_msg("%s: device list %s is not in the admission policy", v->name, v->runtime_dir);
		}
	}
}

/* ---- the device plugin, per entry ---- */

static const char *env_of(const struct dp_response *r, const char *name)
{
	for (int i = 0; i < r->nenv; i++)
		if (!strcmp(r->env[i].name, name))
			return r->env[i].value;
	return NULL;
}

/* Two devices of vendor v (UUIDs GPU-a, GPU-b) and one common file per entry of each vendor's list. */
static void inventory_of(struct dp_inventory *inv, const struct vendor *v)
{
	memset(inv, 0, sizeof(*inv));
	for (int i = 0; i < 2; i++) {
		struct dp_device *d = &inv->dev[inv->ndev++];
		d->id = i;
		d->vendor = v->id;
		d->healthy = true;
		snprintf(d->uuid, sizeof(d->uuid), "GPU-%c", 'a' + i);
		snprintf(d->kubelet_id, sizeof(d->kubelet_id), "GPU-%c", 'a' + i);
		d->nnode = 1;
		snprintf(d->node[0].path, sizeof(d->node[0].path), "/dev/x%d", i);
		snprintf(d->node[0].host_path, sizeof(d->node[0].host_path), "/dev/x%d", i);
	}
	EACH_VENDOR(w) for (const char *const *f = w->common_files; *f; f++) {
		snprintf(inv->common[inv->ncommon].path, sizeof(inv->common[0].path), "%s", *f);
		snprintf(inv->common[inv->ncommon].host_path, sizeof(inv->common[0].host_path), "%s", *f);
		inv->common_vendor[inv->ncommon++] = w->id;
	}
}

static void test_devplugin_per_vendor(void **state)
{
	(void)state;
	struct dp_inventory *inv = malloc(sizeof(*inv));
	struct dp_response *r = malloc(sizeof(*r));
	assert_non_null(inv);
	assert_non_null(r);
	struct dp_config cfg;
	char err[256];
	int both[] = { 0, 1 };
	EACH_VENDOR(v) {
		inventory_of(inv, v);
		dp_config_default(&cfg);
		assert_int_equal(dp_response_build(inv, &cfg, both, 2, NULL, r, err, sizeof(err)), 0);
		/* its own files and its vendor's common files, no other vendor's */
		assert_int_equal(r->nspec, 2 + count_of(v->common_files));
		for (const char *const *f = v->common_files; *f; f++) {
			bool found = false;
			for (int i = 0; i < r->nspec; i++)
				found |= !strcmp(r->spec[i].path, *f);
			assert_true(found);
		}
		for (const char *const *e = v->plugin_env; *e; e++)
			assert_string_equal(env_of(r, *e), "GPU-a,GPU-b");
		int nenv = count_of(v->plugin_env);
		if (v->runtime_env[0]) {
			assert_string_equal(env_of(r, v->runtime_env), "GPU-a,GPU-b");
			nenv++;
		}
		assert_int_equal(r->nenv, nenv);
		assert_int_equal(r->nmount, 0);
		/* volume mounts: one per device under the runtime's list, where it has one */
		cfg.delivery = DP_DELIVERY_VOLUME_MOUNTS;
		assert_int_equal(dp_response_build(inv, &cfg, both, 2, NULL, r, err, sizeof(err)), 0);
		if (v->runtime_dir[0]) {
			char want[DP_PATH_MAX];
			snprintf(want, sizeof(want), "%s/GPU-b", v->runtime_dir);
			assert_int_equal(r->nmount, 2);
			assert_string_equal(r->mount[1].container_path, want);
			assert_string_equal(env_of(r, v->runtime_env), v->runtime_dir);
		} else {
			assert_int_equal(r->nmount, 0);
		}
		/* CDI: the vendor's kind, and its runtime told to add nothing */
		cfg.delivery = DP_DELIVERY_CDI;
		assert_int_equal(dp_response_build(inv, &cfg, both, 2, NULL, r, err, sizeof(err)), 0);
		char want[128];
		snprintf(want, sizeof(want), "%s=GPU-a", v->cdi_kind);
		assert_int_equal(r->ncdi, 2);
		assert_string_equal(r->cdi[0], want);
		assert_int_equal(r->nspec, 0);
		if (v->runtime_env[0])
			assert_string_equal(env_of(r, v->runtime_env), v->runtime_off);
		/* a share: the vendor's isolation variables, if it has any */
		cfg.delivery = DP_DELIVERY_DEVICES;
		struct dp_pod share;
		memset(&share, 0, sizeof(share));
		share.shared = true;
		share.mem_mib = 4096;
		share.core_pct = 25;
		assert_int_equal(dp_response_build(inv, &cfg, both, 2, &share, r, err, sizeof(err)), 0);
		assert_string_equal(env_of(r, "GPU_SCHEDULING_SHARED_CORE_PERCENT"), "25");
		if (v->share.core_env)
			assert_string_equal(env_of(r, v->share.core_env), "25");
		if (v->share.mem_env)
			assert_string_equal(env_of(r, v->share.mem_env), "0=4096M,1=4096M");
	}
	free(r);
	free(inv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_entry_complete),
		cmocka_unit_test(test_names_unique),
		cmocka_unit_test(test_names_as_before),
		cmocka_unit_test(test_every_vendor_detected),
		cmocka_unit_test(test_webhook_per_vendor),
		cmocka_unit_test(test_admission_policy_names_every_vendor),
		cmocka_unit_test(test_devplugin_per_vendor),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
