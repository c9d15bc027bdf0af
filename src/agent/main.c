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
#include "devplugin.h"

#include "log.h"
#include "strnum.h"

#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define EXIT_DETECT_PARTIAL 3

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
	      "\n"
	      "options:\n"
	      "  --node NAME        node name (default: $NODE_NAME, else the host name)\n"
	      "  --tools-dir DIR    run the vendor tools from DIR instead of searching PATH\n"
	      "  --host-root DIR    the host's directories the tools need are mounted under\n"
	      "                     DIR (e.g. /host): find the vendor tools in the host's bin\n"
	      "                     directories and run them chrooted there, with the host's\n"
	      "                     libraries and this container's /proc (needs\n"
	      "                     CAP_SYS_CHROOT, and CAP_SYS_ADMIN for the /proc; the\n"
	      "                     DaemonSet uses this)\n"
	      "  --timeout SECONDS  time limit per tool run (default 10); the tool's whole\n"
	      "                     process group is killed when it passes\n"
	      "  --compact          print the JSON on one line\n"
	      "  --no-timestamp     leave status.lastUpdated out (stable output)\n"
	      "  --log-level LEVEL  debug, info, warn or error (default info); logs go to stderr\n"
	      "  --log-json         log lines as JSON objects\n"
	      "\n"
	      "options of run:\n"
	      "  --kubeconfig FILE  API server and credentials (default: the pod's service\n"
	      "                     account, else $KUBECONFIG)\n"
	      "  --context NAME     kubeconfig context (default: current-context)\n"
	      "  --interval SECONDS detect every SECONDS (default 30); changes are written\n"
	      "                     at once, an unchanged status every --resync rounds\n"
	      "  --resync ROUNDS    rewrite even without changes every ROUNDS rounds, so\n"
	      "                     status.lastUpdated shows the agent is alive (default 10)\n"
	      "  --once             one round, then exit: 0 published, 3 published but some\n"
	      "                     vendor's tools failed, 1 could not publish\n"
	      "\n"
	      "the device plugin (run --device-plugin; docs/node.md):\n"
	      "  --device-plugin    be kubelet's device plugin for gpu.scheduling/gpu (whole\n"
	      "                     GPUs), gpu.scheduling/gpu-share (share slots) and\n"
	      "                     gpu.scheduling/claim (claim tickets): each container gets\n"
	      "                     exactly the devices the extender bound to its pod\n"
	      "  --delivery MODE    how a container gets its devices: devices (device files\n"
	      "                     and env, any runtime), volume-mounts (NVIDIA container\n"
	      "                     runtime, env from the pod ignored), cdi (CDI device names;\n"
	      "                     the spec is written to --cdi-dir) (default devices)\n"
	      "  --plugin-dir DIR   kubelet's device-plugins directory\n"
	      "                     (default " DP_PLUGIN_DIR ")\n"
	      "  --podresources-socket PATH\n"
	      "                     kubelet's PodResources socket, also for the podresources\n"
	      "                     command (default " DP_PODRESOURCES_SOCKET ")\n"
	      "  --cdi-dir DIR      where the CDI spec goes (default " DP_CDI_DIR ")\n"
	      "  --share-slots N    share slots per GPU: at most N shared pods on one GPU\n"
	      "                     (default 48, what one MPS server serves)\n"
	      "  --claim-tickets N  tickets for claim-only pods whose claim the webhook could\n"
	      "                     not read (default 110, kubelet's pod limit)\n"
	      "  --mps-pipe-dir DIR the MPS control daemon's pipe directory on the host: shared\n"
	      "                     containers get it mounted and CUDA_MPS_PIPE_DIRECTORY set\n"
	      "  --metrics-listen HOST:PORT\n"
	      "                     serve the allocation audit's /metrics there (default: not\n"
	      "                     served; the DaemonSet uses 0.0.0.0:9402)\n"
	      "  --ledger-namespace NS\n"
	      "                     where the extender keeps the ledger Leases the audit\n"
	      "                     reads (default gpu-system)\n"
	      "  --audit-interval S compare kubelet's record with the bindings and the ledger\n"
	      "                     every S seconds, and after each Allocate (default 30)\n"
	      "  --device-root DIR  TEST ONLY: the device files are under DIR instead of /\n"
	      "                     (fake GPUs made by the test harness)\n"
	      "  -h, --help         this text\n"
	      "  --version          the agent's version\n"
	      "\n"
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

struct opts {
	const char *node;
	const char *tools_dir;
	const char *host_root;
	double timeout_s;
	bool compact;
	bool no_timestamp;
	enum log_level level;
	bool log_json;
	const char *cmd;
	const char *kubeconfig;
	const char *context;
	int interval_s;
	int resync_rounds;
	bool once;
	bool device_plugin;
	struct dp_config dp;
};

/* An absolute path option into dst (DP_PATH_MAX); false after a usage message. */
/* A whole number option in [lo, hi]; what says what it counts ("whole seconds"). */
static bool int_option(int *dst, const char *opt, const char *value, int lo, int hi, const char *what)
{
	if (strnum_int(value, lo, hi, dst))
		return true;
	fprintf(stderr, "gpu-agent: %s wants %s between %d and %d, not '%s'\n", opt, what, lo, hi, value);
	return false;
}

static bool path_option(char *dst, const char *opt, const char *value)
{
	if (value[0] != '/' || strlen(value) >= DP_PATH_MAX) {
		fprintf(stderr, "gpu-agent: %s wants an absolute path shorter than %d characters, not '%s'\n",
			opt, DP_PATH_MAX, value);
		return false;
	}
	snprintf(dst, DP_PATH_MAX, "%s", value);
	return true;
}

/* 0 ok, 1 exit 0 (help/version printed), 2 usage error. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	enum {
		OPT_NODE = 256, OPT_TOOLS, OPT_TIMEOUT, OPT_COMPACT, OPT_NOTS, OPT_LEVEL, OPT_LJSON, OPT_VERSION,
		OPT_KUBECONFIG, OPT_CONTEXT, OPT_INTERVAL, OPT_RESYNC, OPT_ONCE, OPT_HOST_ROOT,
		OPT_DEVICE_PLUGIN, OPT_DELIVERY, OPT_PLUGIN_DIR, OPT_PODRES, OPT_CDI_DIR, OPT_SHARE_SLOTS,
		OPT_CLAIM_TICKETS, OPT_MPS_PIPE_DIR, OPT_DEVICE_ROOT, OPT_METRICS_LISTEN, OPT_LEDGER_NS, OPT_AUDIT_EVERY,
	};
	static const struct option longopts[] = {
		{ "node", required_argument, NULL, OPT_NODE },
		{ "tools-dir", required_argument, NULL, OPT_TOOLS },
		{ "host-root", required_argument, NULL, OPT_HOST_ROOT },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "compact", no_argument, NULL, OPT_COMPACT },
		{ "no-timestamp", no_argument, NULL, OPT_NOTS },
		{ "log-level", required_argument, NULL, OPT_LEVEL },
		{ "log-json", no_argument, NULL, OPT_LJSON },
		{ "kubeconfig", required_argument, NULL, OPT_KUBECONFIG },
		{ "context", required_argument, NULL, OPT_CONTEXT },
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{ "resync", required_argument, NULL, OPT_RESYNC },
		{ "once", no_argument, NULL, OPT_ONCE },
		{ "device-plugin", no_argument, NULL, OPT_DEVICE_PLUGIN },
		{ "delivery", required_argument, NULL, OPT_DELIVERY },
		{ "plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR },
		{ "podresources-socket", required_argument, NULL, OPT_PODRES },
		{ "cdi-dir", required_argument, NULL, OPT_CDI_DIR },
		{ "share-slots", required_argument, NULL, OPT_SHARE_SLOTS },
		{ "claim-tickets", required_argument, NULL, OPT_CLAIM_TICKETS },
		{ "mps-pipe-dir", required_argument, NULL, OPT_MPS_PIPE_DIR },
		{ "device-root", required_argument, NULL, OPT_DEVICE_ROOT },
		{ "metrics-listen", required_argument, NULL, OPT_METRICS_LISTEN },
		{ "ledger-namespace", required_argument, NULL, OPT_LEDGER_NS },
		{ "audit-interval", required_argument, NULL, OPT_AUDIT_EVERY },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	memset(o, 0, sizeof(*o));
	o->timeout_s = 10;
	o->level = LOG_INFO;
	o->interval_s = 30;
	o->resync_rounds = 10;
	dp_config_default(&o->dp);
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_NODE:
			o->node = optarg;
			break;
		case OPT_TOOLS:
			o->tools_dir = optarg;
			break;
		case OPT_HOST_ROOT:
			o->host_root = optarg;
			if (!path_option(o->dp.host_root, "--host-root", optarg))
				return 2;
			break;
		case OPT_TIMEOUT:
			if (!strnum_double(optarg, &o->timeout_s) || o->timeout_s <= 0 || o->timeout_s > 3600) {
				fprintf(stderr, "gpu-agent: --timeout wants seconds between 0 and 3600, not '%s'\n",
					optarg);
				return 2;
			}
			break;
		case OPT_COMPACT:
			o->compact = true;
			break;
		case OPT_NOTS:
			o->no_timestamp = true;
			break;
		case OPT_LEVEL:
			if (!log_level_parse(optarg, &o->level)) {
				fprintf(stderr, "gpu-agent: --log-level wants debug, info, warn or error\n");
				return 2;
			}
			break;
		case OPT_LJSON:
			o->log_json = true;
			break;
		case OPT_KUBECONFIG:
			o->kubeconfig = optarg;
			break;
		case OPT_CONTEXT:
			o->context = optarg;
			break;
		case OPT_INTERVAL:
			if (!int_option(&o->interval_s, "--interval", optarg, 1, 86400, "whole seconds"))
				return 2;
			break;
		case OPT_RESYNC:
			if (!int_option(&o->resync_rounds, "--resync", optarg, 1, 100000, "a number of rounds"))
				return 2;
			break;
		case OPT_ONCE:
			o->once = true;
			break;
		case OPT_DEVICE_PLUGIN:
			o->device_plugin = true;
			break;
		case OPT_DELIVERY:
			if (!dp_delivery_parse(optarg, &o->dp.delivery)) {
				fprintf(stderr, "gpu-agent: --delivery wants devices, volume-mounts or cdi, not '%s'\n", optarg);
				return 2;
			}
			break;
		case OPT_PLUGIN_DIR:
			if (!path_option(o->dp.plugin_dir, "--plugin-dir", optarg))
				return 2;
			break;
		case OPT_PODRES:
			if (!path_option(o->dp.podresources_socket, "--podresources-socket", optarg))
				return 2;
			break;
		case OPT_CDI_DIR:
			if (!path_option(o->dp.cdi_dir, "--cdi-dir", optarg))
				return 2;
			break;
		case OPT_MPS_PIPE_DIR:
			if (!path_option(o->dp.mps_pipe_dir, "--mps-pipe-dir", optarg))
				return 2;
			break;
		case OPT_DEVICE_ROOT:
			if (!path_option(o->dp.device_root, "--device-root", optarg))
				return 2;
			break;
		case OPT_SHARE_SLOTS:
			if (!int_option(&o->dp.share_slots, "--share-slots", optarg, 1, 100, "a number"))
				return 2;
			break;
		case OPT_METRICS_LISTEN:
			if (!strchr(optarg, ':') || strlen(optarg) >= sizeof(o->dp.metrics_listen)) {
				fprintf(stderr, "gpu-agent: --metrics-listen wants HOST:PORT, not '%s'\n", optarg);
				return 2;
			}
			snprintf(o->dp.metrics_listen, sizeof(o->dp.metrics_listen), "%s", optarg);
			break;
		case OPT_LEDGER_NS:
			if (!*optarg || strlen(optarg) >= sizeof(o->dp.ledger_ns) || strchr(optarg, '/')) {
				fprintf(stderr, "gpu-agent: --ledger-namespace wants a namespace, not '%s'\n", optarg);
				return 2;
			}
			snprintf(o->dp.ledger_ns, sizeof(o->dp.ledger_ns), "%s", optarg);
			break;
		case OPT_AUDIT_EVERY:
			if (!int_option(&o->dp.audit_every_s, "--audit-interval", optarg, 1, 86400, "whole seconds"))
				return 2;
			break;
		case OPT_CLAIM_TICKETS:
			if (!int_option(&o->dp.claim_tickets, "--claim-tickets", optarg, 1, 1000, "a number"))
				return 2;
			break;
		case 'h':
			usage(stdout);
			return 1;
		case OPT_VERSION:
			printf("gpu-agent %s (commit %s)\n", AGENT_VERSION, GPU_COMMIT);
			return 1;
		default:
			fprintf(stderr, "gpu-agent: unknown option '%s' (see --help)\n", argv[optind - 1]);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	o->cmd = argv[optind];
	if (optind + 1 < argc) {
		fprintf(stderr, "gpu-agent: unexpected argument '%s' after the command\n", argv[optind + 1]);
		return 2;
	}
	return 0;
}

/* --node, else $NODE_NAME, else the host name (lower case, as the kubelet names nodes). */
static int node_name(const struct opts *o, char *buf, size_t len)
{
	const char *n = o->node;
	if (!n || !*n)
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
		.kubeconfig = o->kubeconfig,
		.context = o->context,
		.node = name,
		.interval_s = o->interval_s,
		.resync_rounds = o->resync_rounds,
		.once = o->once,
		.tools = { .tools_dir = o->tools_dir, .host_root = o->host_root, .timeout_ms = tool_timeout_ms(o) },
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
		.host_root = o->host_root,
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
				agent_rfc3339_now(ts, sizeof(ts));
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
	if (!strcmp(o.cmd, "help")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "gpu-agent: unknown command '%s' (see --help)\n", o.cmd);
	return 2;
}
