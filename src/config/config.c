#include "config.h"
#include "strnum.h"
#include "yamljson.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum opt_type { OPT_STR, OPT_INT, OPT_SIZE, OPT_BOOL, OPT_POLICY, OPT_LOGLEVEL, OPT_RESOURCES };

struct option_def {
	const char *flag;     /* without the leading "--" */
	const char *key;      /* config-file key */
	enum opt_type type;
	size_t offset;        /* into struct config */
	size_t size;          /* for strings */
	const char *arg;      /* argument name in --help */
	const char *help;
	const char *which;    /* resource kind for OPT_RESOURCES */
};

#define STR(f) OPT_STR, offsetof(struct config, f), sizeof(((struct config *)0)->f)
#define NUM(t, f) t, offsetof(struct config, f), 0

static const struct option_def options[] = {
	{ "listen", "listen", STR(listen), "HOST:PORT", "address of the extender's HTTP(S) endpoint (default 127.0.0.1:8888)", NULL },
	{ "url-prefix", "urlPrefix", STR(url_prefix), "PATH", "path prefix of the verbs, e.g. /gpu-scheduler for urlPrefix http://host:port/gpu-scheduler", NULL },
	{ "max-body", "maxBodyBytes", NUM(OPT_SIZE, max_body), "BYTES", "largest request body accepted; larger ones get 413 (default 8388608)", NULL },
	{ "threads", "threads", NUM(OPT_INT, threads), "N", "HTTP worker threads (default: number of CPUs)", NULL },
	{ "max-connections", "maxConnections", NUM(OPT_INT, max_connections), "N", "connections open at once, all clients together (default 4096; the open-files limit is raised to fit)", NULL },
	{ "max-connections-per-address", "maxConnectionsPerAddress", NUM(OPT_INT, max_per_address), "N", "connections open at once from one client address (default 2048: above kube-scheduler's binds in flight, one connection each, which passed 512 in a burst of 4000 pods on a loaded API server; below what starves others)", NULL },
	{ "bind-threads", "bindThreads", NUM(OPT_INT, bind_threads), "N", "cluster mode: threads that carry out binds, which wait on the API server, so that filter and prioritize never queue behind them (default 64)", NULL },
	{ "filter-keeps-best", "filterKeepsBest", NUM(OPT_INT, filter_keeps_best), "N", "filter passes only the N nodes that fit best under the pod's policy (default 0: every node that fits). With 1, kube-scheduler skips prioritize and its own scoring for GPU pods (less work a pod), but its soft preferences (preferred affinity, spreading) no longer weigh in", NULL },
	{ "policy", "defaultPolicy", NUM(OPT_POLICY, policy), "NAME", "default scoring policy; pods override it with the gpu.scheduling/policy annotation", NULL },
	{ "resource-gpu", "resources.gpu", NUM(OPT_RESOURCES, res), "NAMES", "extended resources counted as whole GPUs (comma-separated aliases)", "gpu" },
	{ "resource-gpu-memory", "resources.gpuMemory", NUM(OPT_RESOURCES, res), "NAMES", "extended resources giving shared GPU memory in MiB per GPU", "memory" },
	{ "resource-gpu-core", "resources.gpuCore", NUM(OPT_RESOURCES, res), "NAMES", "extended resources giving shared GPU compute in percent per GPU", "core" },
	{ "resource-gpu-share", "resources.gpuShare", NUM(OPT_RESOURCES, res), "NAMES", "extended resources giving how many GPUs a share spans (the node's share slots)", "share" },
	{ "inventory", "inventory", STR(inventory), "FILE", "standalone mode: read the cluster from this List (JSON or YAML) instead of an API server", NULL },
	{ "tls-cert", "tls.certFile", STR(tls_cert), "FILE", "serve the verbs over HTTPS with this PEM certificate (enableHTTPS)", NULL },
	{ "tls-key", "tls.keyFile", STR(tls_key), "FILE", "private key of --tls-cert", NULL },
	{ "client-ca", "tls.clientCAFile", STR(client_ca), "FILE", "with --tls-cert: only clients with a certificate of this CA (kube-scheduler's) may call the verbs; /healthz, /readyz, /version and /metrics stay open", NULL },
	{ "tls-reload-interval", "tls.reloadIntervalSeconds", NUM(OPT_INT, tls_reload_s), "SECONDS", "how often the certificate, key and client CA files (verbs and webhook) are read again, and served from new connections on when they changed (default 10; 0: only on SIGHUP)", NULL },
	{ "debug-listen", "debug.listen", STR(debug_listen), "HOST:PORT", "plain-HTTP address of /debug/nodes, kept off the verb port (default 127.0.0.1:8889; \"\": off)", NULL },
	{ "log-level", "log.level", NUM(OPT_LOGLEVEL, log_level), "LEVEL", "debug, info, warn or error (default info)", NULL },
	{ "log-json", "log.json", NUM(OPT_BOOL, log_json), NULL, "write logs as JSON lines instead of logfmt", NULL },
	{ "kubeconfig", "kubeconfig", STR(kubeconfig), "FILE", "cluster mode: kubeconfig to use (default: in-cluster service account)", NULL },
	{ "context", "context", STR(context), "NAME", "kubeconfig context (default: current-context)", NULL },
	{ "lease-namespace", "leaseNamespace", STR(lease_namespace), "NS", "namespace of the reservation Leases (default gpu-system)", NULL },
	{ "identity", "identity", STR(identity), "NAME", "this replica's name in reservations (default: hostname)", NULL },
	{ "insecure-skip-tls-verify", "insecureSkipTLSVerify", NUM(OPT_BOOL, insecure_skip_tls_verify), NULL, "do not verify the API server's certificate (logs a warning; never in production)", NULL },
	{ "reap-interval", "reapIntervalSeconds", NUM(OPT_INT, reap_interval_s), "SECONDS", "how often reservations of gone or finished pods are released (default 10)", NULL },
	{ "bind-timeout", "bindTimeoutSeconds", NUM(OPT_INT, bind_timeout_s), "SECONDS", "a reservation whose pod is not bound after this long is released (default 60)", NULL },
	{ "watch-idle-timeout", "watchIdleTimeoutSeconds", NUM(OPT_INT, watch_idle_timeout_s), "SECONDS", "cluster mode: a watch of ledgers, reservations or pods silent this long (no event, no bookmark) is listed again, not ready meanwhile (default 120)", NULL },
	{ "gang-timeout", "gang.timeoutSeconds", NUM(OPT_INT, gang_timeout_s), "SECONDS", "cluster mode: a gang's reserved places that no member took within this long are released (default 300; a gang's own gangTimeoutSeconds or scheduleTimeoutSeconds comes first)", NULL },
	{ "gang-topology-key", "gang.topologyKey", STR(gang_topology_key), "LABEL", "node label whose values are the topology domains (zones, racks) a gang is kept inside (default topology.kubernetes.io/zone)", NULL },
	{ "pod-selector", "podSelector", STR(pod_selector), "SELECTOR", "label selector of the pods that hold GPUs, watched to rebuild allocations (default gpu.scheduling/managed=true)", NULL },
	{ "webhook-listen", "webhook.listen", STR(webhook_listen), "HOST:PORT", "serve the mutating webhook (/mutate, HTTPS) on this address", NULL },
	{ "webhook-cert", "webhook.certFile", STR(webhook_cert), "FILE", "PEM certificate of the webhook server", NULL },
	{ "webhook-key", "webhook.keyFile", STR(webhook_key), "FILE", "private key of --webhook-cert", NULL },
	{ "webhook-visible-devices-env", "webhook.visibleDevicesEnv", NUM(OPT_BOOL, webhook_env), NULL, "add CUDA/NVIDIA/ROCR visible-devices variables to GPU pods (default true; false where the node agent's device plugin delivers the devices)", NULL },
	{ "system-namespaces", "webhook.systemNamespaces", STR(system_namespaces), "NS,NS", "namespaces whose privileged pods may select GPUs themselves (default kube-system,gpu-system)", NULL },
	{ "marker-resource", "webhook.markerResource", STR(marker_resource), "NAME", "resource the webhook adds to claim-only pods so kube-scheduler sends them to the extender (default gpu.scheduling/claim)", NULL },
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

void config_defaults(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->listen, sizeof(cfg->listen), "127.0.0.1:8888");
	cfg->max_body = 8u << 20;
	cfg->policy = POLICY_BINPACK;
	api_resources_default(&cfg->res);
	cfg->log_level = LOG_INFO;
	snprintf(cfg->lease_namespace, sizeof(cfg->lease_namespace), "gpu-system");
	cfg->reap_interval_s = 10;
	cfg->bind_threads = 64;
	cfg->max_connections = 4096;
	cfg->max_per_address = 2048;
	cfg->tls_reload_s = 10;
	cfg->gang_timeout_s = 300;
	snprintf(cfg->gang_topology_key, sizeof(cfg->gang_topology_key), "topology.kubernetes.io/zone");
	snprintf(cfg->debug_listen, sizeof(cfg->debug_listen), "127.0.0.1:8889");
	cfg->bind_timeout_s = 60;
	cfg->watch_idle_timeout_s = 120;
	snprintf(cfg->pod_selector, sizeof(cfg->pod_selector), "gpu.scheduling/managed=true");
	snprintf(cfg->marker_resource, sizeof(cfg->marker_resource), "gpu.scheduling/claim");
	cfg->webhook_env = true;
	snprintf(cfg->system_namespaces, sizeof(cfg->system_namespaces), "kube-system,gpu-system");
}

static int set_option(struct config *cfg, const struct option_def *o, const char *value,
		      const char *name, char *err, size_t errlen)
{
	char *field = (char *)cfg + o->offset;
	int64_t v;
	switch (o->type) {
	case OPT_STR:
		if (strlen(value) >= o->size) {
			snprintf(err, errlen, "%s: longer than %zu characters", name, o->size - 1);
			return -1;
		}
		memcpy(field, value, strlen(value) + 1);
		return 0;
	case OPT_INT:
		if (!strnum_i64(value, &v) || v < 0 || v > 1000000) {
			snprintf(err, errlen, "%s: '%s' is not a number in 0..1000000", name, value);
			return -1;
		}
		*(int *)field = (int)v;
		return 0;
	case OPT_SIZE:
		if (!strnum_quantity(value, 1, &v) || v < 1024 || v > (int64_t)1 << 34) {
			snprintf(err, errlen, "%s: '%s' is not a size between 1Ki and 16Gi", name, value);
			return -1;
		}
		*(size_t *)field = (size_t)v;
		return 0;
	case OPT_BOOL:
		if (!strcmp(value, "true") || !strcmp(value, "1"))
			*(bool *)field = true;
		else if (!strcmp(value, "false") || !strcmp(value, "0"))
			*(bool *)field = false;
		else {
			snprintf(err, errlen, "%s: '%s' is not true or false", name, value);
			return -1;
		}
		return 0;
	case OPT_POLICY:
		if (!policy_parse(value, (enum policy_id *)field)) {
			snprintf(err, errlen, "%s: unknown policy '%s'", name, value);
			return -1;
		}
		return 0;
	case OPT_LOGLEVEL:
		if (!log_level_parse(value, (enum log_level *)field)) {
			snprintf(err, errlen, "%s: '%s' is not debug, info, warn or error", name, value);
			return -1;
		}
		return 0;
	case OPT_RESOURCES:
		return api_resources_set(&cfg->res, o->which, value, err, errlen);
	}
	return -1;
}

/* A scalar (or a list of strings, for resources) of the config file as text. */
static int value_text(const cJSON *v, char *out, size_t size)
{
	if (cJSON_IsString(v))
		return snprintf(out, size, "%s", v->valuestring) < (int)size ? 0 : -1;
	if (cJSON_IsBool(v))
		return snprintf(out, size, "%s", cJSON_IsTrue(v) ? "true" : "false") ? 0 : -1;
	if (cJSON_IsNumber(v))
		return snprintf(out, size, "%.0f", v->valuedouble) < (int)size ? 0 : -1;
	if (cJSON_IsArray(v)) {
		size_t len = 0;
		out[0] = '\0';
		const cJSON *it;
		cJSON_ArrayForEach(it, v) {
			if (!cJSON_IsString(it))
				return -1;
			int w = snprintf(out + len, size - len, "%s%s", len ? "," : "", it->valuestring);
			if (w < 0 || (size_t)w >= size - len)
				return -1;
			len += (size_t)w;
		}
		return 0;
	}
	return -1;
}

/* Walks the file's mapping; nested keys are joined with '.'. */
static int apply_object(struct config *cfg, const cJSON *obj, const char *prefix, char *err, size_t errlen)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, obj) {
		char key[128];
		snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", it->string);
		const struct option_def *o = NULL;
		for (size_t i = 0; i < NOPTIONS && !o; i++)
			if (!strcmp(options[i].key, key))
				o = &options[i];
		if (!o && cJSON_IsObject(it)) {
			if (apply_object(cfg, it, key, err, errlen))
				return -1;
			continue;
		}
		if (!o) {
			snprintf(err, errlen, "unknown setting '%s'", key);
			return -1;
		}
		char text[1024];
		if (value_text(it, text, sizeof(text))) {
			snprintf(err, errlen, "%s: wrong type", key);
			return -1;
		}
		if (set_option(cfg, o, text, key, err, errlen))
			return -1;
	}
	return 0;
}

int config_load_file(struct config *cfg, const char *path, char *err, size_t errlen)
{
	cJSON *root = yamljson_load(path, 1 << 20, err, errlen);
	if (!root)
		return -1;
	int rc = 0;
	if (!cJSON_IsObject(root)) {
		snprintf(err, errlen, "%s: must be a mapping of settings", path);
		rc = -1;
	} else if (apply_object(cfg, root, "", err, errlen)) {
		char tmp[256];
		snprintf(tmp, sizeof(tmp), "%s: %s", path, err);
		snprintf(err, errlen, "%s", tmp);
		rc = -1;
	}
	cJSON_Delete(root);
	return rc;
}

void config_usage(FILE *out)
{
	fprintf(out,
		"usage: gpu-extender serve [--config FILE] [options]\n"
		"\n"
		"Runs the GPU scheduler extender. With --inventory it runs standalone on\n"
		"that file; otherwise it watches the cluster named by --kubeconfig or the\n"
		"in-cluster service account. Every option can also be set in the config\n"
		"file under the key shown in brackets; flags override the file.\n"
		"\n"
		"  --config FILE\n        settings file (YAML or JSON)\n"
		"  --help\n        print this help\n");
	for (size_t i = 0; i < NOPTIONS; i++) {
		const struct option_def *o = &options[i];
		fprintf(out, "  --%s%s%s\n        %s [%s]\n", o->flag, o->arg ? " " : "",
			o->arg ? o->arg : "", o->help, o->key);
	}
}

static const struct option_def *find_flag(const char *name, size_t len)
{
	for (size_t i = 0; i < NOPTIONS; i++)
		if (strlen(options[i].flag) == len && !strncmp(options[i].flag, name, len))
			return &options[i];
	return NULL;
}

int config_parse_args(struct config *cfg, int argc, char **argv, FILE *out, char *err, size_t errlen)
{
	/* The file first, so that flags override it wherever they appear. */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			config_usage(out);
			return 1;
		}
		const char *file = NULL;
		if (!strcmp(a, "--config")) {
			if (i + 1 >= argc) {
				snprintf(err, errlen, "--config needs a file");
				return -1;
			}
			file = argv[++i];
		} else if (!strncmp(a, "--config=", 9)) {
			file = a + 9;
		}
		if (file && config_load_file(cfg, file, err, errlen))
			return -1;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--config")) {
			i++;
			continue;
		}
		if (!strncmp(a, "--config=", 9))
			continue;
		if (strncmp(a, "--", 2)) {
			snprintf(err, errlen, "unexpected argument '%s'", a);
			return -1;
		}
		const char *name = a + 2;
		const char *eq = strchr(name, '=');
		const struct option_def *o = find_flag(name, eq ? (size_t)(eq - name) : strlen(name));
		if (!o) {
			snprintf(err, errlen, "unknown flag '%s' (see --help)", a);
			return -1;
		}
		const char *value = eq ? eq + 1 : NULL;
		if (!value && o->type == OPT_BOOL)
			value = "true";
		if (!value) {
			if (i + 1 >= argc) {
				snprintf(err, errlen, "--%s needs %s", o->flag, o->arg);
				return -1;
			}
			value = argv[++i];
		}
		char label[80];
		snprintf(label, sizeof(label), "--%s", o->flag);
		if (set_option(cfg, o, value, label, err, errlen))
			return -1;
	}
	return 0;
}

int config_listen_split(const char *listen, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(listen, ':');
	if (!colon || (size_t)(colon - listen) >= hostlen)
		return -1;
	memcpy(host, listen, (size_t)(colon - listen));
	host[colon - listen] = '\0';
	if (host[0] == '[') {      /* [::1]:8888 */
		size_t n = strlen(host);
		if (n < 2 || host[n - 1] != ']')
			return -1;
		memmove(host, host + 1, n - 2);
		host[n - 2] = '\0';
	}
	if (!host[0])
		snprintf(host, hostlen, "0.0.0.0");
	return strnum_int(colon + 1, 0, 65535, port) ? 0 : -1;
}
