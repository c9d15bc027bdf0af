/*
 * gpu-extender serve: reads the config, fills the cache (from the inventory
 * file, or from the cluster), serves the verbs, and stops cleanly on
 * SIGTERM or SIGINT (in-flight requests finish). SIGHUP reloads the
 * inventory in standalone mode.
 */
#include "serve.h"
#include "cache.h"
#include "cluster.h"
#include "config.h"
#include "events.h"
#include "extender.h"
#include "heap.h"
#include "httpd.h"
#include "inventory.h"
#include "jsonarena.h"
#include "log.h"
#include "metrics.h"
#include "nodesum.h"
#include "nudge.h"
#include "reserve.h"
#include "webhook.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* With the file checks off, how often servers replaced by a SIGHUP reload are looked at. */
#define RETIRED_CHECK_SECONDS 10

struct server {
	struct config cfg;
	struct cache *cache;
	struct extender *ext;
	atomic_bool ready;            /* standalone: the inventory is loaded */
	/* cluster mode */
	struct kube_client *client;
	struct cluster cl;            /* zeroed: stopping it does nothing */
	struct reserve *resv;
	struct events *events;        /* NULL: Events off, or standalone */
	struct nodesum_writer *nodesum;   /* the GpuNodeStatus counts; NULL: off, or standalone */
	struct nudge *nudge;          /* NULL: nudges off, or standalone */
	struct webhook *wh;
	atomic_bool trimmed;          /* cluster: memory of the first lists handed back (is_ready) */
	struct httpd *verbs, *webhook_httpd, *debug_httpd;
};

/* Ready when the cache is filled (and, in cluster mode, reservations rebuilt); else why not. */
static bool is_ready(void *ctx, char *why, size_t size)
{
	struct server *s = ctx;
	if (!s->client) {
		snprintf(why, size, "the inventory is not loaded");
		return atomic_load(&s->ready);
	}
	if (!cluster_ready(&s->cl, why, size))
		return false;
	if (!reserve_ready(s->resv)) {
		snprintf(why, size, "reservations are being rebuilt from the ledgers and the pods");
		return false;
	}
	/* The first lists' parsed pages are gone: give their memory back to the system, once. */
	if (!atomic_exchange(&s->trimmed, true))
		heap_trim();
	return true;
}

static void on_healthz(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	(void)req;
	resp->content_type = "text/plain";
	buf_adds(&resp->body, "ok\n");
}

static void on_readyz(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)req;
	struct server *s = ctx;
	resp->content_type = "text/plain";
	char why[300];
	if (is_ready(s, why, sizeof(why))) {
		buf_adds(&resp->body, "ok\n");
	} else {
		resp->status = 503;
		buf_printf(&resp->body, "not ready: %s\n", why);
	}
}

static void on_version(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)ctx;
	(void)req;
	buf_adds(&resp->body, "{\"version\":\"" GPU_VERSION "\",\"api\":\"gpu.scheduling/v1\"}\n");
}

/* A node's devices of the model of dev[first], counted by state (metrics_gpu_state_names). */
static void model_counts(const struct gpu_node *n, int first, int count[MGPU_STATES])
{
	memset(count, 0, sizeof(int) * MGPU_STATES);
	for (int i = first; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		if (strcmp(n->info[i].model, n->info[first].model))
			continue;
		if (d->health != GPU_HEALTHY)
			count[MGPU_UNHEALTHY]++;
		else if (d->exclusive || d->external)
			count[MGPU_WHOLE]++;
		else if (d->shared)
			count[MGPU_SHARED]++;
		else if (gpu_usable(d))
			count[MGPU_FREE]++;
	}
}

static bool model_seen_before(const struct gpu_node *n, int i)
{
	for (int k = 0; k < i; k++)
		if (!strcmp(n->info[k].model, n->info[i].model))
			return true;
	return false;
}

/* Idle compute that only shares can use (on devices a share holds) over all idle compute; as kubectl gpu. */
static double fragmentation(const struct gpu_node *n)
{
	int64_t idle = 0, partial = 0;
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		if (!gpu_usable(d) || d->mig || d->exclusive)
			continue;
		idle += gpu_free_core(d);
		partial += d->shared ? gpu_free_core(d) : 0;
	}
	return idle ? (double)partial / (double)idle : 0;
}

/* "\"} N\n", the end of a series whose value is a device count (not negative). */
static void add_count_end(struct buf *out, int n)
{
	char v[16], *p = v + sizeof(v);
	*--p = '\n';
	do
		*--p = (char)('0' + n % 10);
	while ((n /= 10) > 0);
	*--p = ' ';
	*--p = '}';
	*--p = '"';
	buf_add(out, p, (size_t)(v + sizeof(v) - p));
}

static void node_series(const struct metric_family *f, const struct gpu_node *n, struct buf *out)
{
	if (f->index == MNODE_FRAGMENTATION) {
		buf_adds(out, f->name);
		buf_adds(out, "{node=");
		metrics_quote(out, n->name);
		buf_printf(out, "} %.6g\n", fragmentation(n));
		return;
	}
	for (int i = 0; i < n->ndev; i++) {
		if (model_seen_before(n, i))
			continue;
		int count[MGPU_STATES];
		model_counts(n, i, count);
		/* Appends, not a printf a series: 260,000 series at 65,000 nodes. */
		for (int st = 0; st < MGPU_STATES; st++) {
			buf_adds(out, f->name);
			buf_adds(out, "{node=");
			metrics_quote(out, n->name);
			buf_adds(out, ",model=");
			metrics_quote(out, n->info[i].model[0] ? n->info[i].model : "unknown");
			buf_adds(out, ",state=\"");
			buf_adds(out, metrics_gpu_state_names[st]);
			add_count_end(out, count[st]);
		}
	}
}

/*
 * A scrape under way: the page goes out a part at a time as the connection
 * takes it (httpd's stream), its per-node series from the snapshot taken
 * when the scrape began, its gauges as they were then.
 */
struct scrape {
	struct metrics_gauges g;
	struct metrics_cursor at;
	struct snapshot *snap;
};

/* Nodes a part of the page: about 90 KiB of series. */
#define SCRAPE_NODES 1024

/* The per-node families, SCRAPE_NODES nodes at a time (lock-free, as the verbs read the cache). */
static bool per_node(void *ctx, const struct metric_family *f, size_t *pos, struct buf *out)
{
	const struct snapshot *snap = ((struct scrape *)ctx)->snap;
	if (!snap)
		return false;
	for (size_t end = *pos + SCRAPE_NODES; *pos < snap->n && *pos < end; (*pos)++) {
		const struct gpu_node *n = snapshot_node(snap, *pos)->node;
		if (n && n->ndev)
			node_series(f, n, out);
	}
	return *pos < snap->n;
}

static bool scrape_more(void *ctx, struct buf *out)
{
	struct scrape *sc = ctx;
	return metrics_render_part(out, &sc->g, &sc->at);
}

static void scrape_done(void *ctx)
{
	struct scrape *sc = ctx;
	snapshot_release(sc->snap);
	free(sc);
}

static void on_metrics(void *ctx, const struct http_request *req, struct http_response *resp)
{
	(void)req;
	struct server *s = ctx;
	struct scrape *sc = calloc(1, sizeof(*sc));
	if (!sc) {
		httpd_error(resp, 500, "out of memory");
		return;
	}
	struct cache_stats st;
	cache_stats(s->cache, &st);
	struct heap_usage heap = heap_usage();
	sc->g = (struct metrics_gauges){
		.cache_nodes = (double)st.nodes, .cache_devices = (double)st.devices,
		.cache_allocations = (double)st.allocs, .cache_gpuclaims = (double)st.gpuclaims,
		.ready = is_ready(s, (char[300]){ 0 }, 300) ? 1 : 0,
		.node_summary_pending = nodesum_writer_pending(s->nodesum),
		.heap_in_use = (double)heap.in_use, .heap_free = (double)heap.free,
		.per_node = per_node, .ctx = sc,
	};
	events_counts(s->events, sc->g.events);
	nudge_counts(s->nudge, sc->g.nudges);
	sc->snap = cache_acquire(s->cache);
	resp->content_type = "text/plain; version=0.0.4";
	resp->stream = (struct http_stream){ scrape_more, scrape_done, sc };
}

/*
 * The writer of each node's counts into its GpuNodeStatus (nodesum.h):
 * made before the watches that tell it, started once the reservations are.
 */
static int start_nodesum(struct server *s)
{
	if (!s->cfg.node_summary_interval_s)
		return 0;
	struct nodesum_opts no = {
		.client = s->client, .cache = s->cache, .identity = s->cfg.identity,
		.interval_s = s->cfg.node_summary_interval_s, .writes_per_s = s->cfg.node_summary_writes_per_s,
		.ready = is_ready, .ready_ctx = s,
	};
	s->nodesum = nodesum_writer_new(&no);
	if (!s->nodesum)
		log_error("cannot start the writer of the GpuNodeStatus counts", "error=\"out of memory\"");
	return s->nodesum ? 0 : -1;
}

/* Cluster mode: the API client, the watches, the reservations. */
static int start_cluster(struct server *s)
{
	char err[512];
	struct kube_config kc;
	kube_config_init(&kc);
	int rc = s->cfg.kubeconfig[0] ? kube_config_load(&kc, s->cfg.kubeconfig, s->cfg.context, err, sizeof(err))
				      : kube_config_in_cluster(&kc, err, sizeof(err));
	char server[sizeof(kc.server)];
	snprintf(server, sizeof(server), "%s", kc.server);
	if (!rc) {
		kc.insecure = kc.insecure || s->cfg.insecure_skip_tls_verify;
		s->client = kube_client_new(&kc, err, sizeof(err));
		rc = s->client ? 0 : -1;
	}
	kube_config_release(&kc);
	if (rc) {
		log_error("cannot reach the cluster", "error=\"%s\"", LOG_Q(err));
		return -1;
	}
	if (!s->cfg.identity[0] && gethostname(s->cfg.identity, sizeof(s->cfg.identity) - 1))
		snprintf(s->cfg.identity, sizeof(s->cfg.identity), "gpu-extender");
	if (start_nodesum(s))
		return -1;
	struct cluster_gns_hook hook = { nodesum_writer_seen, s->nodesum };
	if (cluster_start(&s->cl, s->client, s->cache, &hook, err, sizeof(err))) {
		log_error("cannot start the watches", "error=\"%s\"", LOG_Q(err));
		return -1;
	}
	if (s->cfg.events) {
		struct events_opts eo = { .component = "gpu-extender", .instance = s->cfg.identity,
					  .warnings_only = !s->cfg.normal_events };
		s->events = events_new(s->client, &eo);
	}
	struct reserve_opts ro = {
		.events = s->events,
		.client = s->client, .cache = s->cache, .res = &s->cfg.res, .ns = s->cfg.lease_namespace,
		.identity = s->cfg.identity, .bind_timeout_s = s->cfg.bind_timeout_s,
		.watch_idle_timeout_s = s->cfg.watch_idle_timeout_s,
		.reap_interval_s = s->cfg.reap_interval_s, .pod_selector = s->cfg.pod_selector,
		.gang_timeout_s = s->cfg.gang_timeout_s, .gang_topology_key = s->cfg.gang_topology_key,
	};
	if (s->cfg.nudge) {
		struct nudge_opts no = { .cache = s->cache, .kube = s->client, .rate = s->cfg.nudge_rate };
		s->nudge = nudge_new(&no);
		if (s->nudge)
			cache_on_gained(s->cache, nudge_gained, s->nudge);
		else
			log_warn("waiting pods are not nudged: the nudger did not start", "%s", "");
	}
	s->resv = reserve_new(&ro);
	if (!s->resv || reserve_start(s->resv, &s->cl, err, sizeof(err))) {
		log_error("cannot start the reservations", "error=\"%s\"", LOG_Q(err));
		return -1;
	}
	if (s->nodesum && nodesum_writer_start(s->nodesum)) {
		log_error("cannot start the writer of the GpuNodeStatus counts", "error=\"no thread\"");
		return -1;
	}
	log_info("cluster mode", "server=%s identity=%s ledgers=%s", server, s->cfg.identity,
		 s->cfg.lease_namespace);
	return 0;
}

/* The webhook's view of a claim-only pod's GpuClaim: the cached object, decoded under the claims lock. */
static int webhook_claim_of(void *ctx, const char *ns, const char *name, struct claim *out)
{
	struct server *s = ctx;
	char err[200];
	cache_claims_rdlock(s->cache);
	const cJSON *gc = cache_gpuclaim_lookup(s->cache, ns, name);
	int rc = gc ? api_gpuclaim_decode(gc, out, err, sizeof(err)) : -1;
	cache_claims_unlock(s->cache);
	return rc;
}

/* The admission webhook: its own HTTPS server (the API server calls webhooks over TLS only). */
static struct httpd *start_webhook(struct server *s, char *err, size_t errlen)
{
	struct webhook_opts wo = {
		.res = &s->cfg.res, .marker_resource = s->cfg.marker_resource, .no_env = !s->cfg.webhook_env,
		.system_namespaces = s->cfg.system_namespaces, .claim_of = webhook_claim_of, .claim_ctx = s,
	};
	s->wh = webhook_new(&wo);
	if (!s->wh)
		return NULL;
	const struct http_route routes[] = {
		{ .method = "POST", .path = "/mutate", .handler = webhook_mutate, .ctx = s->wh, .verb = VERB_MUTATE },
		{ .method = "GET", .path = "/healthz", .handler = on_healthz, .ctx = s, .verb = VERB_OTHER },
	};
	char host[128];
	int port;
	if (config_listen_split(s->cfg.webhook_listen, host, sizeof(host), &port)) {
		log_error("bad --webhook-listen address", "listen=%s", s->cfg.webhook_listen);
		return NULL;
	}
	struct httpd_config wc = {
		.host = host, .port = port, .url_prefix = "", .max_body = s->cfg.max_body,
		.threads = s->cfg.threads, .tls_cert = s->cfg.webhook_cert, .tls_key = s->cfg.webhook_key,
		.max_connections = s->cfg.max_connections, .max_per_address = s->cfg.max_per_address,
	};
	struct httpd *h = httpd_start(&wc, routes, sizeof(routes) / sizeof(routes[0]), err, errlen);
	if (!h) {
		log_error("cannot start the webhook server", "error=\"%s\"", LOG_Q(err));
		return NULL;
	}
	log_info("serving the webhook", "address=%s:%d path=/mutate marker=%s visible_devices_env=%s", host,
		 httpd_port(h), s->cfg.marker_resource, s->cfg.webhook_env ? "true" : "false");
	return h;
}

/*
 * Room for every connection the servers may hold, plus the API client's and
 * the watches': the soft open-files limit (often 1024) up to the hard one.
 */
static void raise_open_files(const struct config *cfg)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)cfg->max_connections * (cfg->webhook_listen[0] ? 2 : 1) + 256;
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < want)
		log_warn("the open-files limit is below what the connection limits need; raise it or lower maxConnections",
			 "limit=%llu needed=%llu", (unsigned long long)rl.rlim_cur, (unsigned long long)want);
}

static int load_inventory(struct server *s)
{
	char err[512];
	if (inventory_load(s->cache, s->cfg.inventory, err, sizeof(err))) {
		log_error("cannot load the inventory", "file=%s error=\"%s\"", s->cfg.inventory, LOG_Q(err));
		return -1;
	}
	/* The file's JSON tree is gone; give its pages back rather than keep them in the heap. */
	heap_trim();
	struct cache_stats st;
	cache_stats(s->cache, &st);
	log_info("inventory loaded", "file=%s nodes=%zu devices=%zu gpuclaims=%zu", s->cfg.inventory,
		 st.nodes, st.devices, st.gpuclaims);
	/* Valid, but every GPU pod's filter would fail: most likely the wrong file. */
	if (!st.nodes || !st.devices)
		log_warn(!st.nodes ? "the inventory has no nodes: no GPU pod can be placed"
				   : "the inventory has no GPUs (no GpuNodeStatus devices): no GPU pod can be placed",
			 "file=%s", s->cfg.inventory);
	return 0;
}

/*
 * /debug/nodes shows every node's allocations: it has its own plain-HTTP
 * listener, on loopback unless told otherwise (kubectl port-forward reaches
 * it), never on the verb port. Not serving it is not fatal.
 */
static struct httpd *start_debug(struct server *s)
{
	if (!s->cfg.debug_listen[0])
		return NULL;
	char host[128], err[256];
	int port;
	if (config_listen_split(s->cfg.debug_listen, host, sizeof(host), &port)) {
		log_warn("bad --debug-listen address; /debug/nodes is not served", "listen=%s", s->cfg.debug_listen);
		return NULL;
	}
	const struct http_route routes[] = {
		{ .method = "GET", .path = "/debug/nodes", .handler = extender_debug_nodes, .ctx = s->cache, .verb = VERB_OTHER },
	};
	struct httpd_config dc = { .host = host, .port = port, .url_prefix = "", .max_body = 4096, .threads = 1,
				   .max_connections = 64, .max_per_address = 16 };
	struct httpd *h = httpd_start(&dc, routes, 1, err, sizeof(err));
	if (!h) {
		log_warn("/debug/nodes is not served", "listen=%s error=\"%s\"", s->cfg.debug_listen, LOG_Q(err));
		return NULL;
	}
	log_info("serving /debug/nodes", "address=%s:%d", host, httpd_port(h));
	if (strncmp(host, "127.", 4) && strcmp(host, "::1"))
		log_warn("/debug/nodes answers any caller on this address", "address=%s:%d", host, httpd_port(h));
	return h;
}

/* Certificate files read again (reread) or only the replaced servers stopped. */
static void reload_tls(struct httpd *h, const char *which, bool reread)
{
	char err[512] = "";
	if (!h)
		return;
	if (!reread) {
		httpd_retire_idle(h);
		return;
	}
	int rc = httpd_reload_tls(h, err, sizeof(err));
	if (rc > 0)
		log_info("serving with the new certificate files", "server=%s", which);
	else if (rc < 0)
		log_warn("cannot load the changed certificate files; serving with the previous ones", "server=%s error=\"%s\"",
			 which, LOG_Q(err));
}

/* The TLS files load, checked before anything starts: which flags and files, and why not. */
static int check_tls_files(const struct config *cfg)
{
	char err[512];
	if (cfg->tls_cert[0] && httpd_tls_check(cfg->tls_cert, cfg->tls_key, cfg->client_ca, err, sizeof(err))) {
		log_error("the verbs' TLS files do not load", "flags=\"--tls-cert %s --tls-key %s%s%s\" error=\"%s\"",
			  cfg->tls_cert, cfg->tls_key, cfg->client_ca[0] ? " --client-ca " : "", cfg->client_ca, LOG_Q(err));
		return -1;
	}
	if (cfg->webhook_listen[0] && httpd_tls_check(cfg->webhook_cert, cfg->webhook_key, NULL, err, sizeof(err))) {
		log_error("the webhook's TLS files do not load", "flags=\"--webhook-cert %s --webhook-key %s\" error=\"%s\"",
			  cfg->webhook_cert, cfg->webhook_key, LOG_Q(err));
		return -1;
	}
	return 0;
}

/* The cache and the extender, fed by the inventory file or by the cluster. */
static int start_extender(struct server *s)
{
	s->cache = cache_new();
	if (!s->cache)
		return -1;
	struct extender_opts xo = {
		.cache = s->cache, .res = &s->cfg.res, .default_policy = s->cfg.policy,
		.bind = extender_bind_local, .bind_ctx = s->cache,
		.filter_keeps_best = s->cfg.filter_keeps_best,
		.keep_all_for_preferences = s->cfg.keep_all_for_preferences,
		.bind_queue_limit_ms = s->cfg.bind_queue_limit_ms,
	};
	if (s->cfg.inventory[0]) {
		if (load_inventory(s))
			return -1;
		atomic_store(&s->ready, true);
	} else {
		if (start_cluster(s))
			return -1;
		xo.bind = reserve_bind;
		xo.bind_ctx = s->resv;
		xo.fetch = reserve_fetch_pod;
		xo.fetch_ctx = s->resv;
		xo.gang = reserve_gang_route;
		xo.gang_ctx = s->resv;
		xo.ready = is_ready;
		xo.ready_ctx = s;
		xo.assume_binds = true;
		xo.events = s->events;
		xo.nudge = s->nudge;
	}
	s->ext = extender_new(&xo);
	return s->ext ? 0 : -1;
}

/* The verbs' server; with --client-ca, probes and Prometheus need no client certificate, the verbs do. */
static int start_verbs(struct server *s)
{
	const struct http_route routes[] = {
		{ .method = "POST", .path = "/filter", .handler = extender_filter, .ctx = s->ext, .verb = VERB_FILTER },
		{ .method = "POST", .path = "/prioritize", .handler = extender_prioritize, .ctx = s->ext, .verb = VERB_PRIORITIZE },
		{ .method = "POST", .path = "/bind", .handler = extender_bind, .ctx = s->ext, .verb = VERB_BIND,
		  .waits = true, .arrive = extender_bind_arrive },
		{ .method = "POST", .path = "/preempt", .handler = extender_preempt, .ctx = s->ext, .verb = VERB_PREEMPT },
		{ .method = "GET", .path = "/healthz", .handler = on_healthz, .ctx = s, .verb = VERB_OTHER, .open = true },
		{ .method = "GET", .path = "/readyz", .handler = on_readyz, .ctx = s, .verb = VERB_OTHER, .open = true },
		{ .method = "GET", .path = "/version", .handler = on_version, .ctx = s, .verb = VERB_OTHER, .open = true },
		{ .method = "GET", .path = "/metrics", .handler = on_metrics, .ctx = s, .verb = VERB_OTHER, .open = true },
	};
	char host[128], err[512];
	int port;
	config_listen_split(s->cfg.listen, host, sizeof(host), &port);   /* checked with the flags */
	struct httpd_config hc = {
		.host = host, .port = port, .url_prefix = s->cfg.url_prefix, .max_body = s->cfg.max_body,
		.threads = s->cfg.threads, .tls_cert = s->cfg.tls_cert, .tls_key = s->cfg.tls_key,
		.client_ca = s->cfg.client_ca, .max_connections = s->cfg.max_connections,
		.max_per_address = s->cfg.max_per_address,
		/* Standalone binds are in memory: they wait on nothing. */
		.io_threads = s->cfg.inventory[0] ? 0 : s->cfg.bind_threads,
		.on_drained = heap_trim_drained,
	};
	s->verbs = httpd_start(&hc, routes, sizeof(routes) / sizeof(routes[0]), err, sizeof(err));
	if (!s->verbs) {
		log_error("cannot start the HTTP server", "listen=%s error=\"%s\"", s->cfg.listen, LOG_Q(err));
		return -1;
	}
	int bound = httpd_port(s->verbs);
	log_info("serving", "address=%s:%d tls=%s client_certificates=%s prefix=%s policy=%s version=%s", host,
		 bound, s->cfg.tls_cert[0] ? "on" : "off", s->cfg.client_ca[0] ? "required" : "off",
		 s->cfg.url_prefix[0] ? s->cfg.url_prefix : "/", policy_name(s->cfg.policy), GPU_VERSION);
	/* Anyone who reaches the port could bind pods with the extender's rights. */
	if (!s->cfg.client_ca[0] && strncmp(host, "127.", 4) && strcmp(host, "::1"))
		log_warn("the verbs answer any caller on this address: set --tls-cert, --tls-key and --client-ca "
			 "so that only kube-scheduler may call them (docs/security.md)", "address=%s:%d", host, bound);
	return 0;
}

/* Until SIGTERM or SIGINT: SIGHUP reloads, and every tls_reload_s the certificate files are looked at. */
static void serve_until_stopped(struct server *s, const sigset_t *sigs)
{
	struct timespec tick = { s->cfg.tls_reload_s > 0 ? s->cfg.tls_reload_s : RETIRED_CHECK_SECONDS, 0 };
	for (;;) {
		int sig = sigtimedwait(sigs, NULL, &tick);
		if (sig < 0 || sig == SIGHUP) {
			bool reread = sig == SIGHUP || s->cfg.tls_reload_s > 0;
			reload_tls(s->verbs, "verbs", reread);
			reload_tls(s->webhook_httpd, "webhook", reread);
		}
		if (sig == SIGHUP && s->cfg.inventory[0]) {
			log_info("reloading the inventory", "file=%s", s->cfg.inventory);
			load_inventory(s);
		}
		if (sig == SIGINT || sig == SIGTERM) {
			log_info("shutting down", "signal=%d", sig);
			return;
		}
	}
}

static void server_release(struct server *s)
{
	httpd_stop(s->debug_httpd);
	httpd_stop(s->webhook_httpd);
	httpd_stop(s->verbs);
	nodesum_writer_stop(s->nodesum);   /* (before what its passes read) */
	reserve_stop(s->resv);
	cluster_stop(&s->cl);
	nodesum_writer_free(s->nodesum);   /* (after the watch that tells it) */
	reserve_free(s->resv);
	if (s->nudge)
		cache_on_gained(s->cache, NULL, NULL);   /* the writers are stopped; a bind's may still run: unhooked first */
	nudge_free(s->nudge);
	events_free(s->events);       /* after every thread that posts */
	kube_client_free(s->client);
	extender_free(s->ext);
	webhook_free(s->wh);
	cache_free(s->cache);
}

int serve_metrics_main(int argc, char **argv)
{
	if (argc > 1) {
		fprintf(stderr, "usage: gpu-extender metrics (prints the reference of /metrics as Markdown)\n");
		return 2;
	}
	(void)argv;
	int n;
	const struct metric_family *f = metrics_families(&n);
	metrics_reference(stdout, f, n);
	return 0;
}

int serve_main(int argc, char **argv)
{
	struct server s;
	memset(&s, 0, sizeof(s));
	config_defaults(&s.cfg);
	char err[512];
	int rc = config_parse_args(&s.cfg, argc, argv, stdout, err, sizeof(err));
	if (rc > 0)
		return 0;
	if (rc < 0) {
		fprintf(stderr, "gpu-extender serve: %s (see --help)\n", err);
		return 2;
	}
	log_setup(s.cfg.log_level, s.cfg.log_json);
	if (check_tls_files(&s.cfg))
		return 1;
	raise_open_files(&s.cfg);
	heap_setup();
	jsonarena_install();

	/* Signals go to sigwait() below, not to whichever thread they hit. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = 1;
	if (!start_extender(&s) && !start_verbs(&s) &&
	    (!s.cfg.webhook_listen[0] || (s.webhook_httpd = start_webhook(&s, err, sizeof(err))))) {
		s.debug_httpd = start_debug(&s);
		serve_until_stopped(&s, &sigs);
		rc = 0;
	}
	server_release(&s);
	return rc;
}
