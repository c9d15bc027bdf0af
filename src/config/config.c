#include "config.h"
#include "opttab.h"
#include "strnum.h"
#include "yamljson.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int set_policy(void *base, const struct opt *o, const char *value, const char *label, char *err,
		      size_t errlen)
{
	if (policy_parse(value, (enum policy_id *)((char *)base + o->offset)))
		return 0;
	snprintf(err, errlen, "%s: unknown policy '%s'", label, value);
	return -1;
}

static int set_log_level(void *base, const struct opt *o, const char *value, const char *label, char *err,
			 size_t errlen)
{
	if (log_level_parse(value, (enum log_level *)((char *)base + o->offset)))
		return 0;
	snprintf(err, errlen, "%s: '%s' is not debug, info, warn or error", label, value);
	return -1;
}

static int set_resources(void *base, const struct opt *o, const char *value, const char *label, char *err,
			 size_t errlen)
{
	(void)label;
	return api_resources_set((struct api_resources *)((char *)base + o->offset), o->which, value, err, errlen);
}

#define AT(f) OPT_AT(struct config, f)

/* Every setting of gpu-extender serve, in --help's order. */
static const struct opt options[] = {
	{ .flag = "config", .kind = OPT_STR, AT(config_file), .arg = "FILE",
	  .help = "settings file (YAML or JSON) holding any of the settings below under their keys; flags override it" },
	{ .flag = "listen", .key = "listen", .kind = OPT_STR, AT(listen), .def = "127.0.0.1:8888", .arg = "HOST:PORT",
	  .help = "address of the extender's HTTP(S) endpoint" },
	{ .flag = "url-prefix", .key = "urlPrefix", .kind = OPT_STR, AT(url_prefix), .arg = "PATH",
	  .help = "path prefix of the verbs, starting with '/', e.g. /gpu-scheduler for urlPrefix http://host:port/gpu-scheduler" },
	{ .flag = "max-body", .key = "maxBodyBytes", .kind = OPT_SIZE, AT(max_body), .def = "8Mi",
	  .arg = "BYTES", .lo = 1024, .hi = 17179869184.0,
	  .help = "largest request body accepted (1Ki to 16Gi); larger ones get 413" },
	{ .flag = "threads", .key = "threads", .kind = OPT_INT, AT(threads), .def = "0", .arg = "N", .lo = 0, .hi = 1000000,
	  .zero = "the number of CPUs", .help = "HTTP worker threads" },
	{ .flag = "max-connections", .key = "maxConnections", .kind = OPT_INT, AT(max_connections), .def = "4096", .arg = "N",
	  .lo = 1, .hi = 1000000,
	  .help = "connections open at once, all clients together (the open-files limit is raised to fit)" },
	{ .flag = "max-connections-per-address", .key = "maxConnectionsPerAddress", .kind = OPT_INT, AT(max_per_address),
	  .def = "2048", .arg = "N", .lo = 0, .hi = 1000000, .zero = "no limit per address",
	  .help = "connections open at once from one client address (the default is above kube-scheduler's binds in "
		  "flight, one connection each, which passed 512 in a burst of 4000 pods on a loaded API server, and "
		  "below what starves others)" },
	{ .flag = "bind-threads", .key = "bindThreads", .kind = OPT_INT, AT(bind_threads), .def = "64", .arg = "N", .lo = 0,
	  .hi = 1000000, .zero = "binds run on the HTTP worker threads",
	  .help = "cluster mode: threads that carry out binds, which wait on the API server, so that filter and "
		  "prioritize never queue behind them" },
	{ .flag = "filter-keeps-best", .key = "filterKeepsBest", .kind = OPT_INT, AT(filter_keeps_best), .def = "1", .arg = "N",
	  .lo = 0, .hi = 1000000, .zero = "every node that fits",
	  .help = "filter passes only the N nodes that fit best under the pod's policy. With 1, kube-scheduler skips "
		  "prioritize and its own scoring for the pod (the least work a pod); its scoring plugins then no "
		  "longer break ties among nodes the policy rates equal (PreferNoSchedule taints, image locality)" },
	{ .flag = "keep-all-for-preferences", .key = "keepAllForPreferences", .kind = OPT_BOOL,
	  AT(keep_all_for_preferences), .def = "true",
	  .help = "with filterKeepsBest, a pod that states a soft preference (a preferred node or pod (anti-)affinity, "
		  "a ScheduleAnyway topology spread) is passed every node that fits, so that kube-scheduler weighs it" },
	{ .flag = "bind-queue-limit-ms", .key = "bindQueueLimitMs", .kind = OPT_INT, AT(bind_queue_limit_ms),
	  .def = "500", .arg = "MS", .lo = 0, .hi = 4000, .zero = "never",
	  .help = "a GPU pod's filter waits, this long at most, while the oldest bind in flight has waited longer "
		  "than this: kube-scheduler then places pods at the pace the API server takes their binds, and no "
		  "bind nears its httpTimeout (5 s), past which it would place the pod again" },
	{ .flag = "policy", .key = "defaultPolicy", .kind = OPT_FUNC, AT(policy), .set = set_policy, .def = "binpack",
	  .arg = "NAME", .help = "default scoring policy; pods override it with the gpu.scheduling/policy annotation" },
	{ .flag = "resource-gpu", .key = "resources.gpu", .kind = OPT_FUNC, AT(res), .set = set_resources,
	  .which = "gpu", .def = "gpu.scheduling/gpu", .arg = "NAMES",
	  .help = "extended resources counted as whole GPUs (comma-separated aliases)" },
	{ .flag = "resource-gpu-memory", .key = "resources.gpuMemory", .kind = OPT_FUNC, AT(res),
	  .set = set_resources, .which = "memory", .def = "gpu.scheduling/gpu-memory", .arg = "NAMES",
	  .help = "extended resources giving shared GPU memory in MiB per GPU" },
	{ .flag = "resource-gpu-core", .key = "resources.gpuCore", .kind = OPT_FUNC, AT(res), .set = set_resources,
	  .which = "core", .def = "gpu.scheduling/gpu-core", .arg = "NAMES",
	  .help = "extended resources giving shared GPU compute in percent per GPU" },
	{ .flag = "resource-gpu-share", .key = "resources.gpuShare", .kind = OPT_FUNC, AT(res),
	  .set = set_resources, .which = "share", .def = "gpu.scheduling/gpu-share", .arg = "NAMES",
	  .help = "extended resources giving how many GPUs a share spans (the node's share slots)" },
	{ .flag = "inventory", .key = "inventory", .kind = OPT_STR, AT(inventory), .arg = "FILE",
	  .help = "standalone mode: read the cluster from this List (JSON or YAML) instead of an API server" },
	{ .flag = "tls-cert", .key = "tls.certFile", .kind = OPT_STR, AT(tls_cert), .arg = "FILE",
	  .help = "serve the verbs over HTTPS with this PEM certificate (enableHTTPS); needs --tls-key" },
	{ .flag = "tls-key", .key = "tls.keyFile", .kind = OPT_STR, AT(tls_key), .arg = "FILE",
	  .help = "private key of --tls-cert (PEM)" },
	{ .flag = "client-ca", .key = "tls.clientCAFile", .kind = OPT_STR, AT(client_ca), .arg = "FILE",
	  .help = "with --tls-cert: only clients with a certificate of this CA (kube-scheduler's) may call the verbs; "
		  "/healthz, /readyz, /version and /metrics stay open" },
	{ .flag = "tls-reload-interval", .key = "tls.reloadIntervalSeconds", .kind = OPT_INT, AT(tls_reload_s), .def = "10",
	  .arg = "SECONDS", .lo = 0, .hi = 1000000, .zero = "only on SIGHUP",
	  .help = "how often the certificate, key and client CA files (verbs and webhook) are read again, and served "
		  "from new connections on when they changed" },
	{ .flag = "debug-listen", .key = "debug.listen", .kind = OPT_STR, AT(debug_listen), .def = "127.0.0.1:8889",
	  .arg = "HOST:PORT", .help = "plain-HTTP address of /debug/nodes, kept off the verb port (\"\": off)" },
	{ .flag = "log-level", .key = "log.level", .kind = OPT_FUNC, AT(log_level), .set = set_log_level,
	  .def = "info", .arg = "LEVEL", .help = "debug, info, warn or error" },
	{ .flag = "log-json", .key = "log.json", .kind = OPT_BOOL, AT(log_json),
	  .help = "write logs as JSON lines instead of logfmt" },
	{ .flag = "kubeconfig", .key = "kubeconfig", .kind = OPT_STR, AT(kubeconfig), .arg = "FILE",
	  .shown = "the in-cluster service account", .help = "cluster mode: kubeconfig to use" },
	{ .flag = "context", .key = "context", .kind = OPT_STR, AT(context), .arg = "NAME", .shown = "current-context",
	  .help = "kubeconfig context" },
	{ .flag = "lease-namespace", .key = "leaseNamespace", .kind = OPT_STR, AT(lease_namespace), .def = "gpu-system",
	  .arg = "NS", .help = "namespace of the reservation Leases" },
	{ .flag = "identity", .key = "identity", .kind = OPT_STR, AT(identity), .arg = "NAME", .shown = "the host name",
	  .help = "this replica's name in reservations" },
	{ .flag = "insecure-skip-tls-verify", .key = "insecureSkipTLSVerify", .kind = OPT_BOOL,
	  AT(insecure_skip_tls_verify),
	  .help = "do not verify the API server's certificate (logs a warning; never in production)" },
	{ .flag = "reap-interval", .key = "reapIntervalSeconds", .kind = OPT_INT, AT(reap_interval_s), .def = "10",
	  .arg = "SECONDS", .lo = 1, .hi = 1000000, .help = "how often reservations of gone or finished pods are released" },
	{ .flag = "bind-timeout", .key = "bindTimeoutSeconds", .kind = OPT_INT, AT(bind_timeout_s), .def = "60",
	  .arg = "SECONDS", .lo = 3, .hi = 1000000,
	  .help = "a reservation whose pod is not bound after this long is released; a bind posts its binding only "
		  "while it can be answered 1 s before this runs out, counted from the start of its ledger write" },
	{ .flag = "watch-idle-timeout", .key = "watchIdleTimeoutSeconds", .kind = OPT_INT, AT(watch_idle_timeout_s),
	  .def = "120", .arg = "SECONDS", .lo = 1, .hi = 1000000,
	  .help = "cluster mode: a watch of ledgers, reservations or pods silent this long (no event, no bookmark) is "
		  "listed again, not ready meanwhile" },
	{ .flag = "gang-timeout", .key = "gang.timeoutSeconds", .kind = OPT_INT, AT(gang_timeout_s), .def = "300",
	  .arg = "SECONDS", .lo = 1, .hi = 1000000,
	  .help = "cluster mode: a gang's reserved places that no member took within this long are released (a "
		  "gang's own gangTimeoutSeconds or scheduleTimeoutSeconds comes first)" },
	{ .flag = "gang-topology-key", .key = "gang.topologyKey", .kind = OPT_STR, AT(gang_topology_key),
	  .def = "topology.kubernetes.io/zone", .arg = "LABEL",
	  .help = "node label whose values are the topology domains (zones, racks) a gang is kept inside" },
	{ .flag = "events", .key = "events", .kind = OPT_BOOL, AT(events), .def = "true",
	  .help = "cluster mode: post Events on pods and PodGroups (devices bound, no node fits, gang waiting or timed "
		  "out, reservation released); queued and posted by a thread of their own, deduplicated and rate "
		  "limited (false: none)" },
	{ .flag = "normal-events", .key = "normalEvents", .kind = OPT_BOOL, AT(normal_events), .def = "true",
	  .help = "cluster mode, with events: post the Normal Events too (GPUsAllocated on every bound pod, "
		  "GangWaiting, a reservation released as its pod finished); false: Warnings only (the log still "
		  "names each pod's devices): one API write less a bound pod, for clusters that bind hundreds a "
		  "second" },
	{ .flag = "node-summary-interval", .key = "nodeSummary.intervalSeconds", .kind = OPT_INT,
	  AT(node_summary_interval_s), .def = "5", .arg = "SECONDS", .lo = 0, .hi = 3600,
	  .zero = "not written (the columns stay empty)",
	  .help = "cluster mode: how often each node's GPU counts with the reservations (allocated, free, unhealthy: "
		  "the columns of kubectl get gns) are brought up to date in its GpuNodeStatus; a node is written only "
		  "when its counts changed, at most once a period, never on a bind's path" },
	{ .flag = "node-summary-writes-per-second", .key = "nodeSummary.writesPerSecond", .kind = OPT_INT,
	  AT(node_summary_writes_per_s), .def = "20", .arg = "N", .lo = 1, .hi = 10000,
	  .help = "cluster mode: at most this many of those writes a second, all nodes together; the nodes left over "
		  "are written at the next period, first" },
	{ .flag = "nudge", .key = "nudge.enabled", .kind = OPT_BOOL, AT(nudge), .def = "true",
	  .help = "cluster mode: when GPUs free without an event kube-scheduler watches (a reservation released, a "
		  "device turned healthy), annotate the waiting GPU pods that fit now (gpu.scheduling/nudged), so that "
		  "kube-scheduler tries them again after their backoff (10 s at most) instead of after up to 5 minutes "
		  "(false: never)" },
	{ .flag = "nudge-rate", .key = "nudge.perSecond", .kind = OPT_INT, AT(nudge_rate), .def = "20", .arg = "N",
	  .lo = 1, .hi = 100000, .help = "nudges a second at most (and the burst)" },
	{ .flag = "pod-selector", .key = "podSelector", .kind = OPT_STR, AT(pod_selector), .def = "gpu.scheduling/managed=true",
	  .arg = "SELECTOR", .help = "label selector of the pods that hold GPUs, watched to rebuild allocations" },
	{ .flag = "webhook-listen", .key = "webhook.listen", .kind = OPT_STR, AT(webhook_listen), .arg = "HOST:PORT",
	  .help = "serve the mutating webhook (/mutate, HTTPS) on this address; needs --webhook-cert and --webhook-key" },
	{ .flag = "webhook-cert", .key = "webhook.certFile", .kind = OPT_STR, AT(webhook_cert), .arg = "FILE",
	  .help = "PEM certificate of the webhook server" },
	{ .flag = "webhook-key", .key = "webhook.keyFile", .kind = OPT_STR, AT(webhook_key), .arg = "FILE",
	  .help = "private key of --webhook-cert (PEM)" },
	{ .flag = "webhook-visible-devices-env", .key = "webhook.visibleDevicesEnv", .kind = OPT_BOOL,
	  AT(webhook_env), .def = "true",
	  .help = "add CUDA/NVIDIA/ROCR visible-devices variables to GPU pods (false where the node agent's device "
		  "plugin delivers the devices)" },
	{ .flag = "system-namespaces", .key = "webhook.systemNamespaces", .kind = OPT_STR, AT(system_namespaces),
	  .def = "kube-system,gpu-system", .arg = "NS,NS",
	  .help = "namespaces whose privileged pods may select GPUs themselves" },
	{ .flag = "marker-resource", .key = "webhook.markerResource", .kind = OPT_STR, AT(marker_resource),
	  .def = "gpu.scheduling/claim", .arg = "NAME",
	  .help = "resource the webhook adds to claim-only pods so kube-scheduler sends them to the extender" },
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

void config_defaults(struct config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	char err[256];
	/* The table's defaults are constants; test_config checks they load. */
	if (opt_defaults(options, NOPTIONS, cfg, err, sizeof(err))) {
		fprintf(stderr, "gpu-extender: %s\n", err);
		abort();
	}
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
		const struct opt *o = opt_find_key(options, NOPTIONS, key);
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
		if (opt_set(o, cfg, text, key, err, errlen))
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
		"  --help\n        print this help (--help=markdown: as a Markdown table)\n");
	opt_usage(out, options, NOPTIONS);
	fprintf(out, "\nexit status: 0 stopped by SIGTERM/SIGINT, 1 could not start, 2 usage error.\n");
}

void config_markdown(FILE *out)
{
	opt_markdown(out, options, NOPTIONS);
}

/* The settings files named by --config, applied before every flag so that flags override them. */
static int load_config_files(struct config *cfg, int argc, char **argv, char *err, size_t errlen)
{
	for (int i = 1; i < argc; i++) {
		const char *file = NULL;
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			file = argv[++i];
		else if (!strncmp(argv[i], "--config=", 9))
			file = argv[i] + 9;
		if (file && config_load_file(cfg, file, err, errlen))
			return -1;
	}
	return 0;
}

/* A HOST:PORT setting, when set (or always, when needed). */
static int check_listen(const char *flag, const char *value, bool needed, char *err, size_t errlen)
{
	char host[128];
	int port;
	if ((!value[0] && !needed) || !config_listen_split(value, host, sizeof(host), &port))
		return 0;
	snprintf(err, errlen, "--%s: '%s' is not HOST:PORT", flag, value);
	return -1;
}

/* Both files of a pair or neither. */
static int check_pair(const char *a, const char *flag_a, const char *b, const char *flag_b, char *err, size_t errlen)
{
	if (a[0] && !b[0]) {
		snprintf(err, errlen, "--%s needs --%s", flag_a, flag_b);
		return -1;
	}
	if (b[0] && !a[0]) {
		snprintf(err, errlen, "--%s needs --%s", flag_b, flag_a);
		return -1;
	}
	return 0;
}

int config_check(const struct config *cfg, char *err, size_t errlen)
{
	if (cfg->url_prefix[0] && cfg->url_prefix[0] != '/') {
		snprintf(err, errlen, "--url-prefix: '%s' must start with '/'", cfg->url_prefix);
		return -1;
	}
	if (cfg->client_ca[0] && !cfg->tls_cert[0]) {
		snprintf(err, errlen, "--client-ca needs --tls-cert and --tls-key (client certificates need HTTPS)");
		return -1;
	}
	if (cfg->webhook_listen[0] && (!cfg->webhook_cert[0] || !cfg->webhook_key[0])) {
		snprintf(err, errlen, "--webhook-listen needs --webhook-cert and --webhook-key (the API server calls "
			 "webhooks over HTTPS only)");
		return -1;
	}
	return check_pair(cfg->tls_cert, "tls-cert", cfg->tls_key, "tls-key", err, errlen) ||
	       check_pair(cfg->webhook_cert, "webhook-cert", cfg->webhook_key, "webhook-key", err, errlen) ||
	       check_listen("listen", cfg->listen, true, err, errlen) ||
	       check_listen("debug-listen", cfg->debug_listen, false, err, errlen) ||
	       check_listen("webhook-listen", cfg->webhook_listen, false, err, errlen) ? -1 : 0;
}

int config_parse_args(struct config *cfg, int argc, char **argv, FILE *out, char *err, size_t errlen)
{
	const char *pos[1];
	int npos;
	struct config flags = *cfg;
	/* A first pass only to find --help and flags that are wrong, before any file is read. */
	int rc = opt_parse(options, NOPTIONS, &flags, argc, argv, pos, 0, &npos, err, errlen);
	if (rc == OPT_HELP)
		config_usage(out);
	else if (rc == OPT_HELP_MARKDOWN)
		config_markdown(out);
	if (rc)
		return rc > 0 ? 1 : -1;
	if (load_config_files(cfg, argc, argv, err, errlen) ||
	    opt_parse(options, NOPTIONS, cfg, argc, argv, pos, 0, &npos, err, errlen))
		return -1;
	return config_check(cfg, err, errlen);
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
