/*
 * `gpu-agent run`: the loop. Detect, publish what changed, wait for the
 * next interval (or a signal); back off exponentially, with jitter, while
 * the API server cannot be written, logging one line when a failure streak
 * begins and one when it ends. Never exits the process: agent_run()
 * returns the exit status to main.
 *
 * Signals: SIGTERM and SIGINT end the loop after the current round; SIGHUP
 * starts a round at once and forces a full write. The handlers only set a
 * flag and write a byte to a self-pipe that the wait polls; those are this
 * file's only globals, because a signal handler can reach nothing else.
 */
#include "agent_publish.h"

#include "clock.h"
#include "devplugin.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_BASE_MS 1000
#define BACKOFF_MIN_CAP_MS 30000

static volatile sig_atomic_t sig_stop;
static volatile sig_atomic_t sig_hup;
static int sig_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	int saved = errno;
	if (sig == SIGHUP)
		sig_hup = 1;
	else
		sig_stop = sig;
	if (sig_pipe[1] >= 0) {
		ssize_t w = write(sig_pipe[1], "x", 1);
		(void)w;
	}
	errno = saved;
}

static int signals_install(void)
{
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK))
		return -1;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL) || sigaction(SIGHUP, &sa, NULL))
		return -1;
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static void signals_remove(void)
{
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	for (int i = 0; i < 2; i++) {
		if (sig_pipe[i] >= 0)
			close(sig_pipe[i]);
		sig_pipe[i] = -1;
	}
}

/* xorshift64*: jitter only, seeded from the kernel. */
static double next_random(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (double)((*s * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

/* Sleeps until deadline (monotonic ms) or a signal; true when woken by one. */
static bool wait_until(int64_t deadline)
{
	for (;;) {
		if (sig_stop || sig_hup)
			return true;
		int64_t left = deadline - clock_mono_ms();
		if (left <= 0)
			return false;
		struct pollfd pfd = { .fd = sig_pipe[0], .events = POLLIN };
		int pr = poll(&pfd, 1, left > 60000 ? 60000 : (int)left);
		if (pr > 0) {
			char drain[64];
			while (read(sig_pipe[0], drain, sizeof(drain)) > 0)
				;
		}
	}
}

static struct kube_client *connect_api(const struct agent_run_opts *o)
{
	struct kube_config kc;
	kube_config_init(&kc);
	char err[512] = "";
	const char *path = o->kubeconfig;
	int rc;
	if (path && *path) {
		rc = kube_config_load(&kc, path, o->context, err, sizeof(err));
	} else {
		rc = kube_config_in_cluster(&kc, err, sizeof(err));
		const char *env = getenv("KUBECONFIG");
		if (rc && env && *env && !strchr(env, ':')) {
			path = env;
			rc = kube_config_load(&kc, env, o->context, err, sizeof(err));
		}
	}
	struct kube_client *c = NULL;
	if (rc)
		log_error("cannot configure the API client", "error=\"%s\"", LOG_Q(err));
	else if (!(c = kube_client_new(&kc, err, sizeof(err))))
		log_error("cannot create the API client", "error=\"%s\"", LOG_Q(err));
	else
		log_info("publishing to the API server", "server=%s auth=%s", kc.server,
			 path && *path ? path : "in-cluster");
	kube_config_release(&kc);
	return c;
}

/* Starts the device plugin once kubelet's directory is there; one error line per streak. */
static struct devplugin *plugin_start(const struct dp_config *cfg, struct kube_client *kube, bool *failing)
{
	char err[512];
	struct devplugin *dp = devplugin_start(cfg, kube, err, sizeof(err));
	if (!dp && !*failing)
		log_error("cannot start the device plugin; trying again each round", "error=\"%s\"", LOG_Q(err));
	else if (dp && *failing)
		log_info("device plugin started", "dir=%s", cfg->plugin_dir);
	*failing = !dp;
	return dp;
}

/* What the rounds of agent_run share. */
struct run_loop {
	const struct agent_run_opts *o;
	struct kube_client *kube;
	struct agent_node *node;
	struct agent_state st;
	struct agent_publisher pub;
	struct agent_backoff bo;
	uint64_t seed;
	struct devplugin *plugin;
	bool plugin_failing;
	int64_t interval_ms, resync_ms, cap_ms;
};

static void log_published(const struct run_loop *l, const struct agent_pub_result *res)
{
	const char *name = l->o->node;
	if (res->labels_patched)
		log_debug("node labels patched", "node=%s uid=%s", name, l->pub.node_uid);
	if (!res->gns_written)
		return;
	if (res->gns_changed || res->gns_created || l->o->once)
		log_info(res->gns_created ? "created GpuNodeStatus" : "updated GpuNodeStatus",
			 "node=%s devices=%d healthy=%d conflicts=%d", name, l->node->ndev,
			 agent_node_healthy(l->node), res->conflicts);
	else
		log_debug("refreshed GpuNodeStatus", "node=%s devices=%d", name, l->node->ndev);
}

/*
 * Publishes a detected node (drc: the detection's result, 0 or 3 partial;
 * force: SIGHUP came). Returns when the next round starts, or -1 when
 * --once cannot publish; *status is the exit status so far.
 */
static int64_t publish_round(struct run_loop *l, int drc, bool force, int64_t start, int *status)
{
	const char *name = l->o->node;
	char ts[32], err[1600];
	clock_wall_rfc3339(ts, sizeof(ts));
	struct agent_pub_result res;
	int64_t now = clock_mono_ms();
	if (!agent_publish(&l->pub, l->node, ts, now, l->resync_ms, force, &res, err, sizeof(err))) {
		int had = l->bo.failures;
		int64_t since = l->bo.since_ms;
		if (agent_backoff_ok(&l->bo))
			log_info("publishing recovered", "node=%s failures=%d down_s=%lld", name, had,
				 (long long)((now - since) / 1000));
		log_published(l, &res);
		*status = drc ? 3 : 0;
		return start + l->interval_ms;
	}
	if (l->o->once) {
		log_error("cannot publish", "node=%s error=\"%s\"", name, LOG_Q(err));
		*status = 1;
		return -1;
	}
	int64_t delay = agent_backoff_fail(&l->bo, now, BACKOFF_BASE_MS, l->cap_ms, next_random(&l->seed));
	if (l->pub.retry_after_s * 1000 > delay)
		delay = l->pub.retry_after_s * 1000;
	if (l->bo.failures == 1)
		log_error("cannot publish; keeping the last good status and retrying with backoff",
			  "node=%s error=\"%s\" retry_in_ms=%lld", name, LOG_Q(err), (long long)delay);
	else
		log_debug("still cannot publish", "node=%s failures=%d error=\"%s\" retry_in_ms=%lld", name,
			  l->bo.failures, LOG_Q(err), (long long)delay);
	return clock_mono_ms() + delay;
}

/* One round: detect, hand the devices to the device plugin, publish. When the next starts, or -1 to stop. */
static int64_t run_round(struct run_loop *l, int *status)
{
	const struct agent_run_opts *o = l->o;
	int64_t start = clock_mono_ms();
	bool force = sig_hup != 0;
	sig_hup = 0;
	int drc = agent_detect_round(&o->tools, &l->st, o->node, l->node);
	if (drc >= 0 && o->plugin) {
		if (!l->plugin)
			l->plugin = plugin_start(o->plugin, l->kube, &l->plugin_failing);
		if (l->plugin)
			devplugin_update(l->plugin, l->node);   /* before publishing: it may mark devices unhealthy */
	}
	if (drc >= 0)
		return publish_round(l, drc, force, start, status);
	log_error("out of memory during detection; trying again next round", "node=%s", o->node);
	if (o->once) {
		*status = 1;
		return -1;
	}
	return start + l->interval_ms;
}

/* The API client, the node's buffer and the signal handlers; -1 (logged) when one is missing. */
static int run_setup(struct run_loop *l)
{
	l->kube = connect_api(l->o);
	if (!l->kube)
		return -1;
	l->node = malloc(sizeof(*l->node));
	if (!l->node) {
		log_error("out of memory", "%s", "");
		return -1;
	}
	if (signals_install()) {
		log_error("cannot install the signal handlers", "error=\"%s\"", strerror(errno));
		return -1;
	}
	if (getrandom(&l->seed, sizeof(l->seed), GRND_NONBLOCK) != (ssize_t)sizeof(l->seed))
		l->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	l->seed |= 1;
	agent_state_init(&l->st);
	agent_publisher_init(&l->pub, l->kube, l->o->node);
	return 0;
}

int agent_run(const struct agent_run_opts *o)
{
	if (!agent_node_name_valid(o->node)) {
		log_error("not a valid Node name; pass --node or set NODE_NAME", "node=\"%s\"", o->node ? o->node : "");
		return 1;
	}
	int interval_s = o->interval_s > 0 ? o->interval_s : 30;
	int resync_rounds = o->resync_rounds > 0 ? o->resync_rounds : 10;
	struct run_loop l = { .o = o, .interval_ms = (int64_t)interval_s * 1000 };
	l.resync_ms = l.interval_ms * resync_rounds;
	l.cap_ms = l.interval_ms > BACKOFF_MIN_CAP_MS ? l.interval_ms : BACKOFF_MIN_CAP_MS;
	if (run_setup(&l)) {
		free(l.node);
		kube_client_free(l.kube);
		return 1;
	}
	if (!o->once)
		log_info("gpu-agent running", "node=%s interval_s=%d resync_rounds=%d version=%s", o->node,
			 interval_s, resync_rounds, AGENT_VERSION);
	int status = 0;
	for (;;) {
		int64_t next = run_round(&l, &status);
		if (next < 0 || o->once || sig_stop)
			break;
		wait_until(next);
		if (sig_stop)
			break;
	}
	if (!o->once)
		status = 0;   /* a clean stop */
	if (sig_stop)
		log_info("stopping on signal", "node=%s signal=%d", o->node, (int)sig_stop);
	devplugin_stop(l.plugin);
	signals_remove();
	sig_stop = 0;
	sig_hup = 0;
	agent_publisher_release(&l.pub);
	agent_state_release(&l.st);
	free(l.node);
	kube_client_free(l.kube);
	return status;
}
