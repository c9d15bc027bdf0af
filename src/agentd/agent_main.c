/*
 * gpu-agent: the node agent. Detects this node's GPUs with the vendors'
 * own tools and prints (detect) or publishes (run) the node's
 * GpuNodeStatus and labels. See docs/agent.md.
 */
#include "agent.h"

#ifndef GPU_COMMIT
#define GPU_COMMIT "unknown"
#endif
#include "agent_publish.h"
#include "clock.h"
#include "devplugin.h"

#include "log.h"
#include "opttab.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXIT_DETECT_PARTIAL 3

#define XSTR(x) STR_(x)
#define STR_(x) #x

struct opts {
	char node[254];
	char tools_dir[DP_PATH_MAX];
	double timeout_s;
	bool compact;
	bool no_timestamp;
	enum log_level level;
	bool log_json;
	bool version;
	const char *cmd;
	char kubeconfig[DP_PATH_MAX];
	char context[128];
	int interval_s;
	int resync_rounds;
	bool once;
	bool device_plugin;
	struct dp_config dp;
};

static int set_log_level(void *base, const struct opt *o, const char *value, const char *label, char *err,
			 size_t errlen)
{
	if (log_level_parse(value, (enum log_level *)((char *)base + o->offset)))
		return 0;
	snprintf(err, errlen, "%s: '%s' is not debug, info, warn or error", label, value);
	return -1;
}

static int set_delivery(void *base, const struct opt *o, const char *value, const char *label, char *err,
			size_t errlen)
{
	if (dp_delivery_parse(value, (enum dp_delivery *)((char *)base + o->offset)))
		return 0;
	snprintf(err, errlen, "%s wants devices, volume-mounts or cdi, not '%s'", label, value);
	return -1;
}

static int set_listen(void *base, const struct opt *o, const char *value, const char *label, char *err,
		      size_t errlen)
{
	if (strchr(value, ':') && strlen(value) < o->size) {
		snprintf((char *)base + o->offset, o->size, "%s", value);
		return 0;
	}
	snprintf(err, errlen, "%s wants HOST:PORT, not '%s'", label, value);
	return -1;
}

static int set_namespace(void *base, const struct opt *o, const char *value, const char *label, char *err,
			 size_t errlen)
{
	if (*value && strlen(value) < o->size && !strchr(value, '/')) {
		snprintf((char *)base + o->offset, o->size, "%s", value);
		return 0;
	}
	snprintf(err, errlen, "%s wants a namespace, not '%s'", label, value);
	return -1;
}

#define AT(f) OPT_AT(struct opts, f)

/* Every option of gpu-agent, in --help's order; the run and device-plugin ones say so. */
static const struct opt options[] = {
	{ .flag = "node", .kind = OPT_STR, AT(node), .arg = "NAME", .shown = "$NODE_NAME, else the host name",
	  .help = "node name" },
	{ .flag = "tools-dir", .kind = OPT_STR, AT(tools_dir), .arg = "DIR", .shown = "PATH",
	  .help = "run the vendor tools from DIR (which must exist) instead of searching PATH" },
	{ .flag = "host-root", .kind = OPT_PATH, AT(dp.host_root), .arg = "DIR",
	  .help = "the host's directories the tools need are mounted under DIR (e.g. /host): find the vendor tools "
		  "in the host's bin directories and run them chrooted there, with the host's libraries and this "
		  "container's /proc (needs CAP_SYS_CHROOT, and CAP_SYS_ADMIN for the /proc; the DaemonSet uses this)" },
	{ .flag = "timeout", .kind = OPT_DOUBLE, AT(timeout_s), .def = "10", .arg = "SECONDS", .lo = 0.001,
	  .hi = 3600, .help = "time limit per tool run; the tool's whole process group is killed when it passes" },
	{ .flag = "compact", .kind = OPT_BOOL, AT(compact), .help = "print the JSON on one line" },
	{ .flag = "no-timestamp", .kind = OPT_BOOL, AT(no_timestamp), .help = "leave status.lastUpdated out (stable output)" },
	{ .flag = "log-level", .kind = OPT_FUNC, AT(level), .set = set_log_level, .def = "info", .arg = "LEVEL",
	  .help = "debug, info, warn or error; logs go to stderr" },
	{ .flag = "log-json", .kind = OPT_BOOL, AT(log_json), .help = "log lines as JSON objects" },
	{ .flag = "version", .kind = OPT_BOOL, AT(version), .help = "print the agent's version" },
	{ .flag = "kubeconfig", .kind = OPT_STR, AT(kubeconfig), .arg = "FILE",
	  .shown = "the pod's service account, else $KUBECONFIG", .help = "run: API server and credentials" },
	{ .flag = "context", .kind = OPT_STR, AT(context), .arg = "NAME", .shown = "current-context",
	  .help = "run: kubeconfig context" },
	{ .flag = "interval", .kind = OPT_INT, AT(interval_s), .def = "30", .arg = "SECONDS", .lo = 1, .hi = 86400,
	  .help = "run: detect every SECONDS; changes are written at once, an unchanged status every --resync rounds" },
	{ .flag = "resync", .kind = OPT_INT, AT(resync_rounds), .def = "10", .arg = "ROUNDS", .lo = 1, .hi = 100000,
	  .help = "run: rewrite even without changes every ROUNDS rounds, so status.lastUpdated shows the agent is alive" },
	{ .flag = "once", .kind = OPT_BOOL, AT(once),
	  .help = "run: one round, then exit: 0 published, 3 published but some vendor's tools failed, 1 could not publish" },
	{ .flag = "device-plugin", .kind = OPT_BOOL, AT(device_plugin),
	  .help = "run: be kubelet's device plugin for gpu.scheduling/gpu (whole GPUs), gpu.scheduling/gpu-share "
		  "(share slots) and gpu.scheduling/claim (claim tickets): each container gets exactly the devices "
		  "the extender bound to its pod (docs/node.md)" },
	{ .flag = "delivery", .kind = OPT_FUNC, AT(dp.delivery), .set = set_delivery, .def = "devices", .arg = "MODE",
	  .help = "device plugin: how a container gets its devices: devices (device files and env, any runtime), "
		  "volume-mounts (NVIDIA container runtime, env from the pod ignored), cdi (CDI device names; the "
		  "spec is written to --cdi-dir)" },
	{ .flag = "plugin-dir", .kind = OPT_PATH, AT(dp.plugin_dir), .def = DP_PLUGIN_DIR, .arg = "DIR",
	  .help = "device plugin: kubelet's device-plugins directory" },
	{ .flag = "podresources-socket", .kind = OPT_PATH, AT(dp.podresources_socket), .def = DP_PODRESOURCES_SOCKET,
	  .arg = "PATH", .help = "kubelet's PodResources socket, for the device plugin and the podresources command" },
	{ .flag = "cdi-dir", .kind = OPT_PATH, AT(dp.cdi_dir), .def = DP_CDI_DIR, .arg = "DIR",
	  .help = "device plugin: where the CDI spec goes" },
	{ .flag = "share-slots", .kind = OPT_INT, AT(dp.share_slots), .def = XSTR(DP_DEFAULT_SHARE_SLOTS), .arg = "N",
	  .lo = 1, .hi = 100, .help = "device plugin: share slots per GPU: at most N shared pods on one GPU (the "
				      "default is what one MPS server serves)" },
	{ .flag = "claim-tickets", .kind = OPT_INT, AT(dp.claim_tickets), .def = XSTR(DP_DEFAULT_CLAIM_TICKETS),
	  .arg = "N", .lo = 1, .hi = 1000,
	  .help = "device plugin: tickets for claim-only pods whose claim the webhook could not read (the default is "
		  "kubelet's pod limit)" },
	{ .flag = "mps-pipe-dir", .kind = OPT_PATH, AT(dp.mps_pipe_dir), .arg = "DIR",
	  .help = "device plugin: the MPS control daemon's pipe directory on the host: shared containers get it "
		  "mounted and CUDA_MPS_PIPE_DIRECTORY set" },
	{ .flag = "metrics-listen", .kind = OPT_FUNC, AT(dp.metrics_listen), .set = set_listen, .arg = "HOST:PORT",
	  .shown = "not served", .help = "device plugin: serve the allocation audit's /metrics there (the DaemonSet "
					 "uses 0.0.0.0:9402)" },
	{ .flag = "ledger-namespace", .kind = OPT_FUNC, AT(dp.ledger_ns), .set = set_namespace, .def = "gpu-system",
	  .arg = "NS", .help = "device plugin: where the extender keeps the ledger Leases the audit reads" },
	{ .flag = "audit-interval", .kind = OPT_INT, AT(dp.audit_every_s), .def = "30", .arg = "SECONDS", .lo = 1,
	  .hi = 86400, .help = "device plugin: compare kubelet's record with the bindings and the ledger every "
			       "SECONDS, and after each Allocate" },
	{ .flag = "events", .kind = OPT_BOOL, AT(dp.events), .def = "true",
	  .help = "device plugin: post Events (allocation problems on the pod, a device turned unhealthy or healthy "
		  "again on the node); false: none" },
	{ .flag = "device-root", .kind = OPT_PATH, AT(dp.device_root), .arg = "DIR",
	  .help = "TEST ONLY: the device files are under DIR instead of / (fake GPUs made by the test harness)" },
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static void usage(FILE *f)
{
	fputs("usage: gpu-agent <command> [options]\n"
	      "\n"
	      "Detects this node's NVIDIA, AMD and Intel GPUs with the vendors' own tools\n"
	      "(nvidia-smi; rocminfo and rocm-smi; clinfo and xpu-smi) and describes them as\n"
	      "the node's GpuNodeStatus (gpu.scheduling/v1).\n"
	      "\n"
	      "commands:\n"
	      "  detect             print the GpuNodeStatus JSON; needs no cluster\n"
	      "  labels             print the node labels the agent would set, key=value\n"
	      "  run                publish the GpuNodeStatus and the node labels, and keep\n"
	      "                     them up to date (until SIGTERM/SIGINT; SIGHUP: a round now);\n"
	      "                     with --device-plugin also hand the devices to containers\n"
	      "  podresources       print kubelet's record of the devices each container got\n"
	      "                     (its PodResources API), one JSON object per line\n"
	      "  metrics            print the reference of the device plugin's /metrics\n"
	      "                     (a Markdown table, docs/metrics.md)\n"
	      "\n"
	      "options (a boolean takes --flag, --flag=false or --flag false):\n"
	      "  -h, --help\n"
	      "        this text (--help=markdown: the options as a Markdown table)\n",
	      f);
	opt_usage(f, options, NOPTIONS);
	fputs("\n"
	      "A vendor whose tools are not installed has no GPUs. A tool that fails, hangs\n"
	      "or prints something the agent cannot read gives one log line, and that\n"
	      "vendor is reported with state \"failed\" (or \"stale\" with its last good\n"
	      "devices while running).\n"
	      "\n"
	      "exit status of detect and labels: 0 every vendor detected or absent;\n"
	      "3 some vendor's tools failed (the output is still printed); 1 internal\n"
	      "error; 2 usage error. run: 0 when stopped by SIGTERM/SIGINT, 1 when it\n"
	      "cannot start (no API server configuration, bad node name).\n",
	      f);
}

/* What the options say together, and what must exist before any tool runs. 0, or -1 with err. */
static int check_opts(const struct opts *o, char *err, size_t errlen)
{
	struct stat st;
	if (!o->tools_dir[0])
		return 0;
	if (stat(o->tools_dir, &st)) {
		snprintf(err, errlen, "--tools-dir %s: %s", o->tools_dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "--tools-dir %s: not a directory", o->tools_dir);
		return -1;
	}
	return 0;
}

/* 0 ok, 1 exit 0 (help/version printed), 2 usage error. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	char err[512];
	const char *pos[1];
	int npos = 0;
	int rc = opt_defaults(options, NOPTIONS, o, err, sizeof(err));
	if (!rc)
		rc = opt_parse(options, NOPTIONS, o, argc, argv, pos, 1, &npos, err, sizeof(err));
	if (rc == OPT_HELP)
		usage(stdout);
	else if (rc == OPT_HELP_MARKDOWN)
		opt_markdown(stdout, options, NOPTIONS);
	else if (!rc && o->version)
		printf("gpu-agent %s (commit %s)\n", AGENT_VERSION, GPU_COMMIT);
	if (rc > 0 || (!rc && o->version))
		return 1;
	if (!rc && !npos) {
		usage(stderr);
		return 2;
	}
	if (!rc)
		rc = check_opts(o, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "gpu-agent: %s (see --help)\n", err);
		return 2;
	}
	o->cmd = pos[0];
	return 0;
}

/* --node, else $NODE_NAME, else the host name (lower case, as the kubelet names nodes). */
static int node_name(const struct opts *o, char *buf, size_t len)
{
	const char *n = o->node;
	if (!*n)
		n = getenv("NODE_NAME");
	if (n && *n) {
		snprintf(buf, len, "%s", n);
		return 0;
	}
	if (gethostname(buf, len) || !buf[0])
		return -1;
	buf[len - 1] = '\0';
	for (char *p = buf; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return 0;
}

static int tool_timeout_ms(const struct opts *o)
{
	int ms = (int)(o->timeout_s * 1000 + 0.5);
	return ms < 1 ? 1 : ms;
}

static int cmd_run(const struct opts *o)
{
	char name[254];
	if (node_name(o, name, sizeof(name))) {
		fprintf(stderr, "gpu-agent: no node name: pass --node or set NODE_NAME\n");
		return 2;
	}
	struct agent_run_opts ro = {
		.kubeconfig = o->kubeconfig[0] ? o->kubeconfig : NULL,
		.context = o->context[0] ? o->context : NULL,
		.node = name,
		.interval_s = o->interval_s,
		.resync_rounds = o->resync_rounds,
		.once = o->once,
		.tools = { .tools_dir = o->tools_dir, .host_root = o->dp.host_root, .timeout_ms = tool_timeout_ms(o) },
	};
	struct dp_config dp = o->dp;
	snprintf(dp.node, sizeof(dp.node), "%s", name);
	if (o->device_plugin && !o->once)
		ro.plugin = &dp;
	return agent_run(&ro);
}

/* One JSON line per container and resource of kubelet's record. */
static void print_podres(void *ctx, const char *ns, const char *pod, const char *container, const char *resource,
			 const char *const *ids, size_t nids)
{
	(void)ctx;
	cJSON *o = cJSON_CreateObject();
	cJSON *list = cJSON_CreateStringArray(ids, (int)nids);
	char *line = NULL;
	if (o && list && cJSON_AddStringToObject(o, "namespace", ns) && cJSON_AddStringToObject(o, "pod", pod) &&
	    cJSON_AddStringToObject(o, "container", container) && cJSON_AddStringToObject(o, "resource", resource) &&
	    cJSON_AddItemToObject(o, "deviceIds", list)) {
		list = NULL;
		line = cJSON_PrintUnformatted(o);
	}
	if (line)
		printf("%s\n", line);
	else
		fprintf(stderr, "gpu-agent: out of memory\n");
	free(line);
	cJSON_Delete(list);
	cJSON_Delete(o);
}

static int cmd_podresources(const struct opts *o)
{
	char err[512];
	if (dp_podresources_each(o->dp.podresources_socket, print_podres, NULL, err, sizeof(err))) {
		fprintf(stderr, "gpu-agent: %s: %s\n", o->dp.podresources_socket, err);
		return 1;
	}
	return fflush(stdout) ? 1 : 0;
}

static int cmd_detect(const struct opts *o, bool labels)
{
	char name[254];
	if (node_name(o, name, sizeof(name))) {
		fprintf(stderr, "gpu-agent: no node name: pass --node or set NODE_NAME\n");
		return 2;
	}
	struct toolrun_opts run = {
		.tools_dir = o->tools_dir,
		.host_root = o->dp.host_root,
		.timeout_ms = tool_timeout_ms(o),
	};
	struct agent_state st;
	agent_state_init(&st);
	struct agent_node *node = malloc(sizeof(*node));
	if (!node) {
		fprintf(stderr, "gpu-agent: out of memory\n");
		return 1;
	}
	int rc = agent_detect_round(&run, &st, name, node);
	int status = rc < 0 ? 1 : rc ? EXIT_DETECT_PARTIAL : 0;
	if (rc >= 0) {
		if (labels) {
			char buf[4096];
			agent_node_labels(node, buf, sizeof(buf));
			fputs(buf, stdout);
		} else {
			char ts[32];
			if (!o->no_timestamp)
				clock_wall_rfc3339(ts, sizeof(ts));
			char *json = agent_gns_json(node, o->no_timestamp ? NULL : ts, !o->compact);
			if (!json) {
				fprintf(stderr, "gpu-agent: out of memory\n");
				status = 1;
			} else {
				printf("%s\n", json);
				free(json);
			}
		}
		if (fflush(stdout)) {
			perror("gpu-agent: stdout");
			status = 1;
		}
	} else {
		fprintf(stderr, "gpu-agent: out of memory\n");
	}
	free(node);
	agent_state_release(&st);
	return status;
}

int main(int argc, char **argv)
{
	struct opts o;
	int prc = parse_args(argc, argv, &o);
	if (prc == 1)
		return 0;
	if (prc)
		return 2;
	log_setup(o.level, o.log_json);
	/* leftovers of a tool killed at its timeout are reparented to us and reaped,
	   even when the agent is PID 1 of its container */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	if (!strcmp(o.cmd, "detect"))
		return cmd_detect(&o, false);
	if (!strcmp(o.cmd, "labels"))
		return cmd_detect(&o, true);
	if (!strcmp(o.cmd, "run"))
		return cmd_run(&o);
	if (!strcmp(o.cmd, "podresources"))
		return cmd_podresources(&o);
	if (!strcmp(o.cmd, "metrics")) {
		dp_auditor_reference(stdout);
		return 0;
	}
	if (!strcmp(o.cmd, "help")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "gpu-agent: unknown command '%s' (see --help)\n", o.cmd);
	return 2;
}
