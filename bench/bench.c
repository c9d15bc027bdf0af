/*
 * make bench: latency (p50/p99) and throughput of filter+prioritize for
 * clusters of 100, 1000 and 5000 nodes with 8 GPUs each.
 *
 *   in-process  the verb handlers called directly (no HTTP)
 *   http        a real `gpu-extender serve` process, driven over loopback by
 *               a separate load-generator process (this binary, forked) with
 *               libcurl keep-alive connections
 *
 * Each row has a baseline measured in the same run, so that noise on a
 * shared machine shows: in-process, parsing the same request JSON alone;
 * over HTTP, GET /healthz round trips on the same connection. HTTP rows
 * also show the server's own mean time per pair (its /metrics) and its
 * resident memory after the run. The starred cluster has every node in a
 * state of its own: the worst case for the per-state memo (class_memo.h).
 *
 * --scale: 5000, 20000 and 65000 nodes with 8 allocations each, in-process
 * (scale_row): the cache's memory, filter+prioritize naming every node or
 * 10 % of them, and the time to apply one ledger event. The allocations
 * arrive as the ledger watch's list brings them: 500 nodes' a snapshot.
 *
 * --http-scale: 65000 nodes over HTTP (http_scale): a real standalone
 * server given 520k allocations through its own filter and bind, then
 * filter+prioritize naming the 5 % of the nodes kube-scheduler sends at
 * that size, and the server's peak memory.
 */
#include "extender.h"
#include "inventory.h"
#include "jsonarena.h"
#include "kube.h"
#include "ledger.h"
#include "reserve.h"

#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	int i = (int)ceil(p / 100.0 * n) - 1;
	return v[i < 0 ? 0 : i];
}

/*
 * The labels of a node: the first --labels of these (default 1), modeled on
 * a cloud provider's GPU node (GKE's carry two dozen). A value is the one
 * given, or made from the node's number (label_value).
 */
enum label_kind { LABEL_FIXED, LABEL_SHORT_ZONE, LABEL_HOSTNAME, LABEL_ZONE, LABEL_POOL };
static const struct {
	const char *key, *value;
	enum label_kind kind;
} node_labels[] = {
	{ "zone", NULL, LABEL_SHORT_ZONE },
	{ "kubernetes.io/hostname", NULL, LABEL_HOSTNAME },
	{ "kubernetes.io/arch", "amd64", LABEL_FIXED },
	{ "kubernetes.io/os", "linux", LABEL_FIXED },
	{ "beta.kubernetes.io/arch", "amd64", LABEL_FIXED },
	{ "beta.kubernetes.io/os", "linux", LABEL_FIXED },
	{ "node.kubernetes.io/instance-type", "a3-highgpu-8g", LABEL_FIXED },
	{ "beta.kubernetes.io/instance-type", "a3-highgpu-8g", LABEL_FIXED },
	{ "topology.kubernetes.io/region", "us-central1", LABEL_FIXED },
	{ "topology.kubernetes.io/zone", NULL, LABEL_ZONE },
	{ "failure-domain.beta.kubernetes.io/region", "us-central1", LABEL_FIXED },
	{ "failure-domain.beta.kubernetes.io/zone", NULL, LABEL_ZONE },
	{ "topology.gke.io/zone", NULL, LABEL_ZONE },
	{ "cloud.google.com/gke-nodepool", NULL, LABEL_POOL },
	{ "cloud.google.com/gke-accelerator", "nvidia-h100-80gb", LABEL_FIXED },
	{ "cloud.google.com/gke-gpu", "true", LABEL_FIXED },
	{ "cloud.google.com/gke-boot-disk", "pd-balanced", LABEL_FIXED },
	{ "cloud.google.com/gke-container-runtime", "containerd", LABEL_FIXED },
	{ "cloud.google.com/gke-os-distribution", "cos", LABEL_FIXED },
	{ "cloud.google.com/machine-family", "a3", LABEL_FIXED },
	{ "cloud.google.com/gke-max-pods-per-node", "110", LABEL_FIXED },
	{ "cloud.google.com/gke-provisioning", "standard", LABEL_FIXED },
	{ "cloud.google.com/gke-stack-type", "IPV4", LABEL_FIXED },
	{ "cloud.google.com/private-node", "false", LABEL_FIXED },
};
#define NODE_LABELS_MAX ((int)(sizeof(node_labels) / sizeof(node_labels[0])))

static void label_value(int k, int n, char *out, size_t size)
{
	switch (node_labels[k].kind) {
	case LABEL_FIXED: snprintf(out, size, "%s", node_labels[k].value); break;
	case LABEL_SHORT_ZONE: snprintf(out, size, "z%d", n % 4); break;
	case LABEL_HOSTNAME: snprintf(out, size, "node-%05d", n); break;
	case LABEL_ZONE: snprintf(out, size, "us-central1-%c", 'a' + n % 4); break;
	case LABEL_POOL: snprintf(out, size, "gpu-pool-%d", n % 16); break;
	}
}

static int bench_labels = 1;   /* --labels */

/*
 * A synthetic cluster: 8 GPUs per node in two NVLink islands, a third of
 * them partly used. So nodes come in a few states (model x usage), as in a
 * cluster of a few node types; distinct gives every node a memory size of
 * its own instead, so that no two nodes are alike.
 */
static void write_inventory(const char *path, int nodes, bool distinct)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	static const char *const models[] = { "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S" };
	fprintf(f, "{\"kind\":\"List\",\"items\":[");
	for (int n = 0; n < nodes; n++) {
		fprintf(f, "%s{\"kind\":\"Node\",\"metadata\":{\"name\":\"node-%05d\",\"labels\":{", n ? "," : "", n);
		for (int k = 0; k < bench_labels; k++) {
			char value[64];
			label_value(k, n, value, sizeof(value));
			fprintf(f, "%s\"%s\":\"%s\"", k ? "," : "", node_labels[k].key, value);
		}
		fprintf(f, "}}},");
		fprintf(f, "{\"kind\":\"GpuNodeStatus\",\"metadata\":{\"name\":\"node-%05d\"},\"status\":{\"devices\":[", n);
		for (int d = 0; d < 8; d++) {
			bool busy = n % 3 == 0 && d < 3;
			/* as long as NVIDIA's: GPU-8-4-4-4-12 hex digits */
			fprintf(f, "%s{\"id\":%d,\"uuid\":\"GPU-%08x-%04x-4000-8000-%012x\",\"vendor\":\"nvidia\","
				   "\"model\":\"%s\",\"architecture\":\"hopper\",\"memoryMiB\":%d,\"health\":\"Healthy\","
				   "\"island\":\"nvlink-%d\",\"bandwidthGBps\":900,\"inUseBy\":[%s]}",
				d ? "," : "", d, (unsigned)n * 2654435761u, d, (unsigned)n, models[n % 3],
				distinct ? 40000 + n : 81559, d / 4, busy ? "\"other\"" : "");
		}
		fprintf(f, "]}}");
	}
	fprintf(f, "]}\n");
	fclose(f);
}

static const char *bench_policy = "binpack";
/* What the pod's container asks for: 2 whole GPUs, or (the "s" row) a share of one. */
#define WHOLE_GPUS "\"gpu.scheduling/gpu\":\"2\""
#define SHARED_GPU "\"gpu.scheduling/gpu-memory\":\"10000\""
static const char *bench_limits = WHOLE_GPUS;

/* The filter/prioritize arguments up to the node names' list: the pod (bench_limits, bench_policy). */
static void args_head(struct buf *b, const char *uid)
{
	buf_printf(b, "{\"Pod\":{\"metadata\":{\"name\":\"bench\",\"namespace\":\"ml\",\"uid\":\"%s\","
		      "\"annotations\":{\"gpu.scheduling/policy\":\"%s\"}},"
		      "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
		      "{%s}}}]}},\"Nodes\":null,\"NodeNames\":[", uid, bench_policy, bench_limits);
}

/* The filter/prioritize arguments naming count nodes from node-<first> on (wrapping at nodes). */
static char *make_args_window(int nodes, int first, int count, const char *uid)
{
	struct buf b;
	buf_init(&b, 1 << 26);
	args_head(&b, uid);
	for (int n = 0; n < count; n++)
		buf_printf(&b, "%s\"node-%05d\"", n ? "," : "", (first + n) % nodes);
	buf_adds(&b, "]}");
	return buf_detach(&b, NULL);
}

static char *make_args(int nodes, const char *uid)
{
	return make_args_window(nodes, 0, nodes, uid);
}

struct stats {
	double p50, p99, per_s;
	double server_ms;   /* over HTTP: the server's own mean time per pair, from /metrics */
};

static void summarize(double *lat, int n, double wall, struct stats *s)
{
	s->per_s = n / wall;
	s->p50 = pct(lat, n, 50) * 1e3;
	s->p99 = pct(lat, n, 99) * 1e3;
}

/* ---- in-process ---------------------------------------------------------- */

/* One request to a verb; its reply goes to *reply (buf_release it), or away when reply is NULL. */
static void call_for(http_handler h, void *ctx, const char *body, size_t len, struct buf *reply)
{
	struct http_request req = { "POST", "/", body, len, NULL };
	struct http_response resp = { .status = 200 };
	buf_init(&resp.body, 1 << 26);
	struct jsonarena arena;            /* as the HTTP server does */
	jsonarena_begin(&arena, (size_t)1 << 30);
	h(ctx, &req, &resp);
	jsonarena_end(&arena);
	if (resp.status != 200) {
		fprintf(stderr, "bench: status %d: %s\n", resp.status, buf_cstr(&resp.body));
		exit(1);
	}
	if (reply)
		*reply = resp.body;
	else
		buf_release(&resp.body);
}

static void call(http_handler h, void *ctx, const char *body, size_t len)
{
	call_for(h, ctx, body, len, NULL);
}

static void in_process(const char *inv, int nodes, int iters, struct stats *verb, struct stats *base)
{
	struct cache *c = cache_new();
	char err[256];
	if (inventory_load(c, inv, err, sizeof(err))) {
		fprintf(stderr, "bench: %s\n", err);
		exit(1);
	}
	struct api_resources res;
	api_resources_default(&res);
	struct extender_opts o = { .cache = c, .res = &res, .default_policy = POLICY_BINPACK,
				   .bind = extender_bind_local, .bind_ctx = c };
	struct extender *x = extender_new(&o);
	char *body = make_args(nodes, "uid-bench");
	size_t len = strlen(body);
	double *lat = malloc((size_t)iters * sizeof(*lat));
	for (int pass = 0; pass < 2; pass++) {
		double t0 = now_s();
		for (int i = 0; i < iters; i++) {
			double t = now_s();
			if (pass == 0) {
				/* baseline: parse only, twice, as the server parses them */
				struct jsonarena arena;
				jsonarena_begin(&arena, (size_t)1 << 30);
				cJSON_Delete(cJSON_ParseWithLength(body, len));
				cJSON_Delete(cJSON_ParseWithLength(body, len));
				jsonarena_end(&arena);
			} else {
				call(extender_filter, x, body, len);
				call(extender_prioritize, x, body, len);
			}
			lat[i] = now_s() - t;
		}
		summarize(lat, iters, now_s() - t0, pass == 0 ? base : verb);
	}
	free(lat);
	free(body);
	extender_free(x);
	cache_free(c);
}

/* ---- over HTTP ----------------------------------------------------------- */

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
	(void)p;
	(void)ud;
	return size * n;
}

static CURL *client(void)
{
	CURL *h = curl_easy_init();
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	return h;
}

static void post(CURL *h, const char *url, const char *body, size_t len)
{
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	hdr = curl_slist_append(hdr, "Expect:");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
	long code = 0;
	if (curl_easy_perform(h) != CURLE_OK ||
	    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code != 200) {
		fprintf(stderr, "bench: POST %s failed (HTTP %ld)\n", url, code);
		exit(1);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);   /* the list is freed next */
	curl_slist_free_all(hdr);
}

static void get(CURL *h, const char *url)
{
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	if (curl_easy_perform(h) != CURLE_OK) {
		fprintf(stderr, "bench: GET %s failed\n", url);
		exit(1);
	}
}

static size_t keep(char *p, size_t size, size_t n, void *ud)
{
	buf_add(ud, p, size * n);
	return size * n;
}

/* Seconds the server spent on filter and prioritize so far (its /metrics sums). */
static double server_seconds(CURL *h, const char *url)
{
	struct buf b;
	buf_init(&b, 1 << 20);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	get(h, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	double total = 0;
	static const char *const keys[] = {
		"gpu_extender_request_duration_seconds_sum{verb=\"filter\"} ",
		"gpu_extender_request_duration_seconds_sum{verb=\"prioritize\"} ",
	};
	for (size_t k = 0; k < 2; k++) {
		const char *at = strstr(buf_cstr(&b), keys[k]);
		if (at)
			total += atof(at + strlen(keys[k]));
	}
	buf_release(&b);
	return total;
}

/* The load generator's job: sequential latency, then two connections for throughput. */
static void loadgen(int port, int nodes, int iters, int out_fd)
{
	char base[64], filter[96], prio[96], health[96], metrics[96];
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
	snprintf(filter, sizeof(filter), "%s/filter", base);
	snprintf(prio, sizeof(prio), "%s/prioritize", base);
	snprintf(health, sizeof(health), "%s/healthz", base);
	snprintf(metrics, sizeof(metrics), "%s/metrics", base);
	char *body = make_args(nodes, "uid-bench");
	size_t len = strlen(body);
	double *lat = malloc((size_t)iters * sizeof(*lat));
	struct stats st[3];
	CURL *h = client();
	for (int i = 0; i < 20; i++)        /* warm up the connection and the caches */
		post(h, filter, body, len);
	for (int pass = 0; pass < 2; pass++) {
		double served = server_seconds(h, metrics);
		double t0 = now_s();
		for (int i = 0; i < iters; i++) {
			double t = now_s();
			if (pass == 0) {
				get(h, health);
				get(h, health);
			} else {
				post(h, filter, body, len);
				post(h, prio, body, len);
			}
			lat[i] = now_s() - t;
		}
		summarize(lat, iters, now_s() - t0, &st[pass]);
		st[pass].server_ms = (server_seconds(h, metrics) - served) / iters * 1e3;
	}
	/* Throughput with two clients in parallel (the server has two cores too). */
	pid_t kid = fork();
	CURL *mine = kid == 0 ? client() : h;    /* a connection of its own */
	double t0 = now_s();
	int share = iters / 2 > 0 ? iters / 2 : 1;
	for (int i = 0; i < share; i++) {
		post(mine, filter, body, len);
		post(mine, prio, body, len);
	}
	if (kid == 0)
		_exit(0);
	waitpid(kid, NULL, 0);
	st[2].per_s = 2.0 * share / (now_s() - t0);
	if (write(out_fd, st, sizeof(st)) != (ssize_t)sizeof(st))
		_exit(1);
	curl_easy_cleanup(h);
	free(lat);
	free(body);
}

static int free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	if (s < 0 || bind(s, (struct sockaddr *)&a, l) || getsockname(s, (struct sockaddr *)&a, &l)) {
		perror("socket");
		exit(1);
	}
	close(s);
	return ntohs(a.sin_port);
}

/* A memory figure of a process in MiB (field "VmRSS:", "VmHWM:"), from /proc; 0 when unknown. */
static double status_mib(pid_t pid, const char *field)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	double kib = 0;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)))
			kib = atof(line + strlen(field));
	if (f)
		fclose(f);
	return kib / 1024;
}

/* Resident memory of a process in MiB. */
static double rss_of(pid_t pid)
{
	return status_mib(pid, "VmRSS:");
}

/* Starts this process's peak resident memory (VmHWM) again from its RSS now. */
static void reset_peak(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	if (f) {
		fputs("5", f);
		fclose(f);
	}
}

/*
 * Starts `extender serve` on the inventory, on a free loopback port (*port),
 * and waits up to wait_s for its /readyz; exits the bench if it does not
 * answer 200 by then.
 */
static pid_t start_server(const char *extender, const char *inv, int *port, int wait_s)
{
	*port = free_port();
	char listen[32], url[64];
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", *port);
	snprintf(url, sizeof(url), "http://%s/readyz", listen);
	pid_t srv = fork();
	if (srv == 0) {
		execl(extender, extender, "serve", "--inventory", inv, "--listen", listen, "--debug-listen", "", "--log-level", "warn",
		      (char *)NULL);
		perror(extender);
		_exit(127);
	}
	CURL *h = client();
	long code = 0;
	for (int i = 0; i < wait_s * 50 && code != 200; i++) {
		usleep(20000);
		curl_easy_setopt(h, CURLOPT_URL, url);
		if (curl_easy_perform(h) == CURLE_OK)
			curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	}
	curl_easy_cleanup(h);
	if (code != 200) {
		fprintf(stderr, "bench: the extender did not become ready\n");
		kill(srv, SIGTERM);
		exit(1);
	}
	return srv;
}

static void over_http(const char *extender, const char *inv, int nodes, int iters,
		      struct stats *verb, struct stats *base, double *two_clients, double *rss_mib)
{
	int port;
	pid_t srv = start_server(extender, inv, &port, 10);
	int fds[2];
	if (pipe(fds)) {
		perror("pipe");
		exit(1);
	}
	pid_t gen = fork();
	if (gen == 0) {
		close(fds[0]);
		loadgen(port, nodes, iters, fds[1]);
		_exit(0);
	}
	close(fds[1]);
	struct stats st[3];
	ssize_t got = read(fds[0], st, sizeof(st));
	close(fds[0]);
	int gen_status = 0;
	waitpid(gen, &gen_status, 0);
	*rss_mib = rss_of(srv);
	kill(srv, SIGTERM);
	waitpid(srv, NULL, 0);
	if (got != (ssize_t)sizeof(st)) {
		fprintf(stderr, "bench: the load generator failed (status %d)\n", gen_status);
		exit(1);
	}
	*base = st[0];
	*verb = st[1];
	*two_clients = st[2].per_s;
}

/* ---- scale: big clusters with their allocations, in-process ---------------- */

/*
 * --busy: 9 nodes in 10 are full, each GPU held whole by a pod of its own
 * (with the default 8 allocations a node), as on a cluster that runs at
 * capacity: a request then fails most nodes, and for each it must make sure
 * the pod holds no reservation there (a retried bind's own).
 */
static bool bench_busy;

/*
 * The node's allocations: per_node shares of island 0 (devices 0-3), plus
 * extra; island 1 stays free. With --busy, 9 nodes in 10 take whole GPUs instead.
 */
static int node_allocs(int node, int per_node, int extra, struct alloc *out)
{
	int n = per_node + extra;
	bool full = bench_busy && node % 10;
	for (int k = 0; k < n; k++) {
		struct alloc *a = &out[k];
		memset(a, 0, sizeof(*a));
		snprintf(a->uid, sizeof(a->uid), "00000000-0000-0000-%04d-%012d", k, node);
		snprintf(a->pod, sizeof(a->pod), "ml/job-%05d-%d", node, k);
		a->mode = full ? CLAIM_EXCLUSIVE : CLAIM_SHARED;
		a->mem_mib = full ? 0 : 8000;
		a->core = full ? 0 : 100;
		alloc_add_id(a, full ? k % 8 : k % 4);
		a->since = 1700000000;
	}
	return n;
}

/*
 * The prioritize request kube-scheduler sends after the filter of body
 * answered reply: the same pod, the nodes the filter passed (on a busy
 * cluster, few of those the filter was given); their count in *passed.
 */
static char *passed_body(const char *body, const char *reply, int *passed)
{
	cJSON *r = cJSON_Parse(reply);
	const cJSON *names = cJSON_GetObjectItemCaseSensitive(r, "NodeNames");
	const char *list = strstr(body, "\"NodeNames\":[");
	if (!cJSON_IsArray(names) || !list) {
		fprintf(stderr, "bench: a filter reply without NodeNames\n");
		exit(1);
	}
	struct buf b;
	buf_init(&b, 1 << 26);
	buf_add(&b, body, (size_t)(list - body));
	buf_adds(&b, "\"NodeNames\":[");
	const cJSON *n;
	bool first = true;
	cJSON_ArrayForEach(n, names) {
		buf_printf(&b, "%s\"%s\"", first ? "" : ",", n->valuestring);
		first = false;
	}
	buf_adds(&b, "]}");
	*passed = cJSON_GetArraySize(names);
	cJSON_Delete(r);
	return buf_detach(&b, NULL);
}

/* The prioritize request after an in-process filter of body. */
static char *prioritize_body(struct extender *x, const char *body)
{
	struct buf reply;
	call_for(extender_filter, x, body, strlen(body), &reply);
	int passed;
	char *out = passed_body(body, buf_cstr(&reply), &passed);
	buf_release(&reply);
	return out;
}

/*
 * p50/p99 ms of filter+prioritize over iters samples, cycling through
 * nbody bodies; each prioritize names the nodes its filter passed.
 */
static void time_pairs(struct extender *x, char **body, int nbody, int iters, struct stats *out)
{
	char **prio = malloc((size_t)nbody * sizeof(*prio));
	for (int k = 0; k < nbody; k++)
		prio[k] = prioritize_body(x, body[k]);
	/* One pair untimed: parsing the filters' replies above leaves the heap and caches cold for the first. */
	call(extender_filter, x, body[0], strlen(body[0]));
	call(extender_prioritize, x, prio[0], strlen(prio[0]));
	double *lat = malloc((size_t)iters * sizeof(*lat));
	double t0 = now_s();
	for (int i = 0; i < iters; i++) {
		double t = now_s();
		const char *b = body[i % nbody], *p = prio[i % nbody];
		call(extender_filter, x, b, strlen(b));
		call(extender_prioritize, x, p, strlen(p));
		lat[i] = now_s() - t;
	}
	summarize(lat, iters, now_s() - t0, out);
	free(lat);
	for (int k = 0; k < nbody; k++)
		free(prio[k]);
	free(prio);
}

/*
 * One cluster size: nodes (few states) with per_node allocations each, as
 * the ledgers bring them. Prints the cache's memory (this process's RSS
 * growth: nodes, allocations, views), filter+prioritize naming every node
 * and naming 10 % of them (kube-scheduler's percentageOfNodesToScore at
 * that size; a window that moves on each sample), and the time to apply
 * one ledger watch event (a node's allocations replaced, a snapshot
 * published).
 */
/* Objects in a page of a list, as the extender's reflectors ask for them. */
#define LEDGER_PAGE 500

/* Feeds one parsed object to a sink, as a watch event (ADDED). */
static void sink_apply_text(const struct reflector_sink *sink, const char *text)
{
	cJSON *obj = cJSON_Parse(text);
	if (!obj) {
		fprintf(stderr, "bench: unparsable object\n");
		exit(1);
	}
	sink->apply(sink->ctx, false, obj);
	cJSON_Delete(obj);
}

/* What the reservation module takes at one size. */
struct resv_figures {
	double ledgers_mib, pods_mib;   /* RSS growth as each was loaded */
	double reap_mib, reap_ms;       /* one reaper pass: its peak above the loaded process, its time */
	double event_wait_ms;           /* the longest a pod event waited for the module's lock meanwhile */
};

/* A pod event every 100 us while a pass runs: how long each waits to take the lock. */
struct event_prober {
	struct reflector_sink *pods;
	atomic_bool stop;
	double longest_s;
};

static void *probe_events(void *arg)
{
	struct event_prober *e = arg;
	while (!atomic_load(&e->stop)) {
		double t = now_s();
		e->pods->lock(e->pods->ctx);
		e->pods->unlock(e->pods->ctx);
		if (now_s() - t > e->longest_s)
			e->longest_s = now_s() - t;
		usleep(100);
	}
	return NULL;
}

/*
 * The reservation module's share of the process at this size: every
 * node's ledger Lease and every GPU pod, as its watches bring them (pages
 * of 500), into a reservation module over the loaded cache; then one
 * reaper pass over all of it (with every pod alive, it finds nothing to
 * release: its own cost).
 */
static void load_reservations(struct cache *c, const struct api_resources *res, int nodes, int per_node,
			      struct resv_figures *out)
{
	/* An API server that refuses at once: the pass's one call (its gangs' locks) fails fast. */
	struct kube_config kc;
	kube_config_init(&kc);
	snprintf(kc.server, sizeof(kc.server), "http://127.0.0.1:%d", free_port());
	char err[256];
	struct kube_client *kube = kube_client_new(&kc, err, sizeof(err));
	struct reserve_opts ro = { .client = kube, .cache = c, .res = res, .ns = "gpu-system", .identity = "bench" };
	struct reserve *r = kube ? reserve_new(&ro) : NULL;
	struct alloc *a = calloc((size_t)per_node + 1, sizeof(*a));
	struct ledger_entry *e = calloc(1, sizeof(*e));
	struct buf text;
	buf_init(&text, (size_t)1 << 20);
	if (!r || !a || !e) {
		fprintf(stderr, "bench: out of memory\n");
		exit(1);
	}
	struct reflector_sink ledgers, pods;
	reserve_ledger_sink(r, &ledgers);
	reserve_pod_sink(r, &pods);
	char node[32];
	double rss0 = rss_of(getpid());
	for (int n = 0; n < nodes; n++) {
		if (n % LEDGER_PAGE == 0)
			ledgers.lock(ledgers.ctx);
		snprintf(node, sizeof(node), "node-%05d", n);
		struct ledger l;
		ledger_init(&l, node);
		snprintf(l.rv, sizeof(l.rv), "%d", 1000 + n);
		int na = node_allocs(n, per_node, 0, a);
		for (int k = 0; k < na; k++) {
			memset(e, 0, sizeof(*e));
			e->a = a[k];
			char name[64];
			snprintf(name, sizeof(name), "job-%05d-%d", n, k);
			ledger_entry_set_pod(e, "ml", name);
			if (ledger_add(&l, e)) {
				fprintf(stderr, "bench: out of memory\n");
				exit(1);
			}
		}
		buf_clear(&text);
		if (ledger_encode(&l, "gpu-system", "bench", &text)) {
			fprintf(stderr, "bench: cannot encode the ledger of %s\n", node);
			exit(1);
		}
		ledger_release(&l);
		sink_apply_text(&ledgers, buf_cstr(&text));
		if (n % LEDGER_PAGE == LEDGER_PAGE - 1 || n == nodes - 1)
			ledgers.unlock(ledgers.ctx);
	}
	malloc_trim(0);
	double rss1 = rss_of(getpid());
	out->ledgers_mib = rss1 - rss0;
	for (int n = 0, i = 0; n < nodes; n++) {
		int na = node_allocs(n, per_node, 0, a);
		for (int k = 0; k < na; k++, i++) {
			if (i % LEDGER_PAGE == 0)
				pods.lock(pods.ctx);
			buf_clear(&text);
			buf_printf(&text,
				   "{\"metadata\":{\"name\":\"job-%05d-%d\",\"namespace\":\"ml\",\"uid\":\"%s\","
				   "\"labels\":{\"gpu.scheduling/managed\":\"true\"},\"annotations\":{\"gpu.scheduling/allocated\":"
				   "\"node-%05d:%d\"}},\"spec\":{\"nodeName\":\"node-%05d\",\"containers\":[{\"name\":\"main\","
				   "\"image\":\"registry.example/train:1\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu-memory\":"
				   "\"8000\"}}}]},\"status\":{\"phase\":\"Running\"}}",
				   n, k, a[k].uid, n, alloc_id(&a[k], 0), n);
			sink_apply_text(&pods, buf_cstr(&text));
			if (i % LEDGER_PAGE == LEDGER_PAGE - 1)
				pods.unlock(pods.ctx);
		}
	}
	if (nodes * per_node % LEDGER_PAGE)
		pods.unlock(pods.ctx);
	malloc_trim(0);
	double rss2 = rss_of(getpid());
	out->pods_mib = rss2 - rss1;
	reset_peak();
	struct event_prober probe = { .pods = &pods };
	pthread_t prober;
	if (pthread_create(&prober, NULL, probe_events, &probe)) {
		fprintf(stderr, "bench: cannot start a thread\n");
		exit(1);
	}
	double t = now_s();
	reserve_reap(r);
	out->reap_ms = (now_s() - t) * 1000;
	atomic_store(&probe.stop, true);
	pthread_join(prober, NULL);
	out->event_wait_ms = probe.longest_s * 1000;
	out->reap_mib = status_mib(getpid(), "VmHWM:") - rss2;
	buf_release(&text);
	free(e);
	free(a);
	reserve_free(r);
	kube_client_free(kube);
	kube_config_release(&kc);
}

static void scale_row(int nodes, int per_node, int iters)
{
	char inv[] = "/tmp/gpu-bench-XXXXXX", err[256];
	int fd = mkstemp(inv);
	if (fd < 0) {
		perror("mkstemp");
		exit(1);
	}
	close(fd);
	write_inventory(inv, nodes, false);
	malloc_trim(0);
	double rss0 = rss_of(getpid());
	struct cache *c = cache_new();
	if (inventory_load(c, inv, err, sizeof(err))) {
		fprintf(stderr, "bench: %s\n", err);
		exit(1);
	}
	unlink(inv);
	/* The ledgers as a list brings them: a page of 500, one snapshot a page. */
	struct alloc *a = calloc((size_t)per_node + 1, sizeof(*a));
	char name[32];
	for (int n = 0; n < nodes; n++) {
		if (n % LEDGER_PAGE == 0)
			cache_lock(c);
		snprintf(name, sizeof(name), "node-%05d", n);
		cache_set_allocs(c, name, a, node_allocs(n, per_node, 0, a));
		if (n % LEDGER_PAGE == LEDGER_PAGE - 1 || n == nodes - 1)
			cache_unlock(c);
	}
	malloc_trim(0);
	double rss = rss_of(getpid()) - rss0;

	struct api_resources res;
	api_resources_default(&res);
	struct resv_figures rf;
	load_reservations(c, &res, nodes, per_node, &rf);
	struct extender_opts o = { .cache = c, .res = &res, .default_policy = POLICY_BINPACK,
				   .bind = extender_bind_local, .bind_ctx = c };
	struct extender *x = extender_new(&o);
	char *all = make_args(nodes, "uid-bench"), *window[10];
	int tenth = nodes / 10 > 100 ? nodes / 10 : 100;
	for (int k = 0; k < 10; k++)
		window[k] = make_args_window(nodes, k * (nodes / 10), tenth, "uid-bench");
	struct stats every, some, parse;
	/* the baseline: parsing the two bodies naming every node, as the server does */
	double *pl = malloc((size_t)iters * sizeof(*pl)), p0 = now_s();
	for (int i = 0; i < iters; i++) {
		double t = now_s();
		struct jsonarena arena;
		jsonarena_begin(&arena, (size_t)1 << 30);
		cJSON_Delete(cJSON_ParseWithLength(all, strlen(all)));
		cJSON_Delete(cJSON_ParseWithLength(all, strlen(all)));
		jsonarena_end(&arena);
		pl[i] = now_s() - t;
	}
	summarize(pl, iters, now_s() - p0, &parse);
	free(pl);
	time_pairs(x, &all, 1, iters, &every);
	time_pairs(x, window, 10, iters * 10, &some);

	/* ledger events: one node's allocations replaced (one more, then as before), published */
	int events = 400;
	double *lat = malloc((size_t)events * sizeof(*lat));
	for (int i = 0; i < events; i++) {
		int n = (i / 2 * 7919) % nodes;
		snprintf(name, sizeof(name), "node-%05d", n);
		int na = node_allocs(n, per_node, (i + 1) % 2, a);
		double t = now_s();
		cache_lock(c);
		cache_set_allocs(c, name, a, na);
		cache_unlock(c);
		lat[i] = now_s() - t;
	}
	struct stats ev;
	summarize(lat, events, 1, &ev);
	printf("%-6d %8d %8.1f %8.1f %8.1f %8.1f | %8.1f %8.0f %8.1f | %9.3f %9.3f | %6d %9.3f %9.3f | %9.3f %9.3f | %9.3f\n",
	       nodes, nodes * per_node, rss, rf.ledgers_mib, rf.pods_mib, rss + rf.ledgers_mib + rf.pods_mib, rf.reap_mib,
	       rf.reap_ms, rf.event_wait_ms, every.p50, every.p99, tenth, some.p50, some.p99, ev.p50, ev.p99, parse.p50);
	free(lat);
	for (int k = 0; k < 10; k++)
		free(window[k]);
	free(all);
	free(a);
	extender_free(x);
	cache_free(c);
}

static void scale(int only_nodes, int per_node, int iters_override)
{
	static const int sizes[] = { 5000, 20000, 65000 };
	printf("scale, in-process%s: %d allocations per node, %s (8 GPUs, %d label%s, few states), policy %s\n\n",
	       bench_busy ? ", a busy cluster" : "", per_node,
	       bench_busy ? "whole GPUs on 9 nodes in 10 (full), shares on the rest" : "shares", bench_labels,
	       bench_labels == 1 ? "" : "s", bench_policy);
	printf("%-6s %8s %8s %8s %8s %8s | %26s | %19s | %26s | %19s | %9s\n", "", "", "cache", "ledgers", "pods", "all",
	       "a reaper pass", "every node named", "10 % of the nodes named", "one ledger event", "baseline");
	printf("%-6s %8s %8s %8s %8s %8s | %8s %8s %8s | %9s %9s | %6s %9s %9s | %9s %9s | %9s\n", "nodes", "allocs",
	       "RSS MiB", "MiB", "MiB", "MiB", "peak MiB", "ms", "wait ms", "p50 ms", "p99 ms", "named", "p50 ms", "p99 ms", "p50 ms",
	       "p99 ms", "parse ms");
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		int nodes = only_nodes ? only_nodes : sizes[k];
		scale_row(nodes, per_node, iters_override ? iters_override : nodes >= 65000 ? 40 : nodes >= 20000 ? 100 : 300);
		if (only_nodes)
			break;
	}
	printf("\ncache: the nodes and their allocations; ledgers, pods: what the reservation module keeps of the\n"
	       "ledger Leases and the GPU pods its watches bring; all: the three (the process, less its threads)\n"
	       "a reaper pass: one pass over all of them, nothing to release; peak: its most RSS above all;\n"
	       "  wait: the longest a pod event (one every 100 us) waited for the reservation module's lock meanwhile\n");
	printf("baseline: parsing the two bodies that name every node (JSON), p50\n");
	printf("goals: filter+prioritize p99 under 10 ms at 65000 nodes; RSS under 64 MiB at 5000 nodes with 40k "
	       "allocations, under 256 MiB at 65000\n");
}

/* ---- a large cluster over HTTP ---------------------------------------------- */

/*
 * --http-scale: a real `gpu-extender serve` (standalone, on its inventory
 * file) at 65000 nodes, given per_node allocations a node through its own
 * verbs (for each pod a filter naming its node, then its bind, as
 * kube-scheduler places pods), then driven as kube-scheduler drives it at
 * that size: each filter names the nodes percentageOfNodesToScore's
 * adaptive rule lets through (5 % at 65000), drawn at random, and each
 * prioritize the nodes its filter passed.
 */

/*
 * kube-scheduler's numFeasibleNodesToFind with percentageOfNodesToScore
 * unset: the nodes it finds feasible, and so sends an extender, per pod
 * (all of them under 100; else max(5, 50 - all / 125) percent, at least 100).
 */
static int nodes_to_score(int all, int *percent)
{
	*percent = 100;
	if (all < 100)
		return all;
	*percent = 50 - all / 125 < 5 ? 5 : 50 - all / 125;
	int n = (int)((long)all * *percent / 100);
	return n < 100 ? 100 : n;
}

/* POST, the reply's body into reply. */
static void post_keep(CURL *h, const char *url, const char *body, size_t len, struct buf *reply)
{
	buf_clear(reply);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, reply);
	post(h, url, body, len);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
}

/* Writes "5" to the process's clear_refs: its peak RSS (VmHWM) starts again from its RSS now. */
static void reset_peak_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)pid);
	FILE *f = fopen(path, "w");
	if (f) {
		fputs("5", f);
		fclose(f);
	}
}

/*
 * What the kernel's scheduler counted for threads, in seconds: run, on a
 * CPU; wait, runnable but waiting for one (the machine's other work). From
 * schedstat, in nanoseconds, where utime/stime count in 10 ms ticks.
 */
struct sched_s {
	double run, wait;
};

static void add_schedstat(const char *path, struct sched_s *s)
{
	char text[128];
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof(text) - 1);
	if (fd >= 0)
		close(fd);
	unsigned long long run, wait;
	if (n > 0 && (text[n] = '\0', sscanf(text, "%llu %llu", &run, &wait) == 2)) {
		s->run += (double)run / 1e9;
		s->wait += (double)wait / 1e9;
	}
}

/* All the threads of process pid. */
static struct sched_s sched_of(pid_t pid)
{
	struct sched_s s = { 0, 0 };
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(path, sizeof(path), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
			add_schedstat(path, &s);
		}
	if (d)
		closedir(d);
	return s;
}

/* The calling thread. */
static struct sched_s sched_self(void)
{
	struct sched_s s = { 0, 0 };
	add_schedstat("/proc/thread-self/schedstat", &s);
	return s;
}

static double thread_cpu_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A value of a /metrics page, -1 when it has none. */
static double page_value(const char *page, const char *name)
{
	char key[192];
	snprintf(key, sizeof(key), "\n%s ", name);
	const char *at = strstr(page, key);
	return at ? atof(at + strlen(key)) : -1;
}

/* Of the filter and prioritize histograms: the count, and those within 1 and 2.5 ms; and the sums. */
struct served {
	double n[2][3], sum_s;
};

static struct served served_on(const char *page)
{
	static const char *const verbs[] = { "filter", "prioritize" };
	static const char *const les[] = { NULL, "0.001", "0.0025" };
	struct served s = { .sum_s = 0 };
	for (int v = 0; v < 2; v++) {
		char name[160];
		for (int k = 0; k < 3; k++) {
			if (les[k])
				snprintf(name, sizeof(name), "gpu_extender_request_duration_seconds_bucket{verb=\"%s\",le=\"%s\"}",
					 verbs[v], les[k]);
			else
				snprintf(name, sizeof(name), "gpu_extender_request_duration_seconds_count{verb=\"%s\"}", verbs[v]);
			s.n[v][k] = page_value(page, name);
		}
		snprintf(name, sizeof(name), "gpu_extender_request_duration_seconds_sum{verb=\"%s\"}", verbs[v]);
		s.sum_s += page_value(page, name);
	}
	return s;
}

/* What a share holds: 8000 MiB of one GPU, as --scale's allocations. */
#define FILL_LIMITS "\"gpu.scheduling/gpu-memory\":\"8000\""

/* Places per_node pods on each node of [from, to) through filter and bind; exits 1 on a refusal. */
static void fill_nodes(int port, int from, int to, int per_node)
{
	char filter[96], bind[96];
	snprintf(filter, sizeof(filter), "http://127.0.0.1:%d/filter", port);
	snprintf(bind, sizeof(bind), "http://127.0.0.1:%d/bind", port);
	CURL *h = client();
	struct buf b, reply;
	buf_init(&b, 1 << 20);
	buf_init(&reply, 1 << 20);
	for (int n = from; n < to; n++)
		for (int k = 0; k < per_node; k++) {
			char uid[64];
			snprintf(uid, sizeof(uid), "00000000-0000-0000-%04d-%012d", k, n);
			buf_clear(&b);
			buf_printf(&b, "{\"Pod\":{\"metadata\":{\"name\":\"job-%05d-%d\",\"namespace\":\"ml\",\"uid\":\"%s\"},"
				       "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{" FILL_LIMITS
				       "}}}]}},\"NodeNames\":[\"node-%05d\"]}", n, k, uid, n);
			post_keep(h, filter, b.data, b.len, &reply);
			if (!strstr(buf_cstr(&reply), "\"NodeNames\":[\"node-")) {
				fprintf(stderr, "bench: the filter failed job-%05d-%d on its node: %s\n", n, k, buf_cstr(&reply));
				exit(1);
			}
			buf_clear(&b);
			buf_printf(&b, "{\"PodName\":\"job-%05d-%d\",\"PodNamespace\":\"ml\",\"PodUID\":\"%s\","
				       "\"Node\":\"node-%05d\"}", n, k, uid, n);
			post_keep(h, bind, b.data, b.len, &reply);
			if (!strstr(buf_cstr(&reply), "\"Error\":\"\"")) {
				fprintf(stderr, "bench: the bind of job-%05d-%d failed: %s\n", n, k, buf_cstr(&reply));
				exit(1);
			}
		}
	buf_release(&b);
	buf_release(&reply);
	curl_easy_cleanup(h);
}

/* xorshift64*: the same nodes drawn in every run. */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

/* Filter arguments naming count distinct nodes drawn at random (idx: a permutation of 0..nodes-1). */
static void random_args(struct buf *b, int *idx, int nodes, int count, uint64_t *rng, const char *uid)
{
	buf_clear(b);
	args_head(b, uid);
	for (int i = 0; i < count; i++) {
		int j = i + (int)(rng_next(rng) % (uint64_t)(nodes - i));
		int t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
		buf_printf(b, "%s\"node-%05d\"", i ? "," : "", idx[i]);
	}
	buf_adds(b, "]}");
}

/* One server of --http-scale (the build under test, or --baseline-extender's) and what it measured. */
struct scale_srv {
	const char *label;
	pid_t pid;
	char url[4][96];          /* filter, prioritize, healthz, metrics */
	CURL *h;
	double load_s, load_peak, fill_s;
	double filled_rss, scraped_rss, end_rss, hwm;
	double allocs, scrape_ms, scrape_cpu_ms, scrape_mib;
	struct served before, after;
	double *pair, *filt, *run, *wait, *quiet;   /* per sample, seconds; quiet: the pairs that waited for no CPU */
	int nquiet;
	double client_cpu, run_s;
	long passed;
};

/* GET /metrics: the page into page, its wall and server CPU time into s. */
static void scrape(struct scale_srv *s, struct buf *page)
{
	buf_clear(page);
	curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(s->h, CURLOPT_WRITEDATA, page);
	struct sched_s c0 = sched_of(s->pid);
	double t = now_s();
	get(s->h, s->url[3]);
	s->scrape_ms = (now_s() - t) * 1e3;
	s->scrape_cpu_ms = (sched_of(s->pid).run - c0.run) * 1e3;
	s->scrape_mib = (double)page->len / (1 << 20);
	curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, discard);
}

/* Under this, a pair's waits for a CPU (server and client) count as none. */
#define QUIET_WAIT_S 100e-6

/* One filter+prioritize pair on s, sample i (< 0: untimed). */
static void scale_sample(struct scale_srv *s, int i, struct buf *args, struct buf *reply)
{
	struct sched_s srv0 = sched_of(s->pid), me0 = sched_self();
	double cpu0 = thread_cpu_s(), t = now_s();
	post_keep(s->h, s->url[0], args->data, args->len, reply);
	double tf = now_s() - t, cpu1 = thread_cpu_s();
	int passed;
	char *pb = passed_body(buf_cstr(args), buf_cstr(reply), &passed);
	double cpu2 = thread_cpu_s();
	t = now_s();
	post(s->h, s->url[1], pb, strlen(pb));
	double tp = now_s() - t, cpu3 = thread_cpu_s();
	struct sched_s srv1 = sched_of(s->pid), me1 = sched_self();
	free(pb);
	if (i < 0)
		return;
	s->pair[i] = tf + tp;
	s->filt[i] = tf;
	s->run[i] = srv1.run - srv0.run;
	s->wait[i] = srv1.wait - srv0.wait;
	/* Neither the server nor this thread waited for a CPU: the machine's other work took no share. */
	if (s->wait[i] + (me1.wait - me0.wait) < QUIET_WAIT_S)
		s->quiet[s->nquiet++] = s->pair[i];
	s->client_cpu += (cpu1 - cpu0) + (cpu3 - cpu2);
	s->passed += passed;
}

static void scale_start(struct scale_srv *s, const char *exe, const char *inv, int iters)
{
	double t0 = now_s();
	int port;
	s->pid = start_server(exe, inv, &port, 600);
	s->load_s = now_s() - t0;
	s->load_peak = status_mib(s->pid, "VmHWM:");
	reset_peak_of(s->pid);
	static const char *const paths[] = { "filter", "prioritize", "healthz", "metrics" };
	for (int k = 0; k < 4; k++)
		snprintf(s->url[k], sizeof(s->url[k]), "http://127.0.0.1:%d/%s", port, paths[k]);
	double **arr[] = { &s->pair, &s->filt, &s->run, &s->wait, &s->quiet };
	for (size_t k = 0; k < sizeof(arr) / sizeof(arr[0]); k++)
		if (!(*arr[k] = calloc((size_t)iters, sizeof(double)))) {
			fprintf(stderr, "bench: out of memory\n");
			exit(1);
		}
}

/* The allocations, by two connections at once (processes of their own). */
static void scale_fill(struct scale_srv *s, int nodes, int per_node)
{
	fflush(NULL);
	double t0 = now_s();
	pid_t kids[2];
	for (int k = 0; k < 2; k++) {
		kids[k] = fork();
		if (kids[k] == 0) {
			fill_nodes(atoi(strrchr(s->url[0], ':') + 1), k * nodes / 2, (k + 1) * nodes / 2, per_node);
			_exit(0);
		}
	}
	for (int k = 0; k < 2; k++) {
		int st = 0;
		waitpid(kids[k], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			kill(s->pid, SIGTERM);
			exit(1);
		}
	}
	s->fill_s = now_s() - t0;
	s->filled_rss = rss_of(s->pid);
}

/* Over a verb's requests between two readings: those over 1 and over 2.5 ms. */
static void slow_counts(const struct scale_srv *s, int verb, double over[2])
{
	const double *b = s->before.n[verb], *a = s->after.n[verb];
	over[0] = (a[0] - b[0]) - (a[1] - b[1]);
	over[1] = (a[0] - b[0]) - (a[2] - b[2]);
}

static double mean_of(const double *v, int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += v[i];
	return n ? sum / n : 0;
}

static void scale_report(struct scale_srv *srv, int nsrv, int iters)
{
	printf("| build | filter+prioritize p50 ms | p99 ms | filter p50 / p99 ms | server CPU a pair mean / p50 / p99 ms "
	       "| server's wait for a CPU p50 / p99 ms | pairs that waited for no CPU: n, p50 / p99 ms | client CPU a pair ms "
	       "| server ms | pairs/s |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|\n");
	for (int k = 0; k < nsrv; k++) {
		struct scale_srv *s = &srv[k];
		double cpu_mean = mean_of(s->run, iters) * 1e3;
		double server_ms = (s->after.sum_s - s->before.sum_s) / iters * 1e3;
		struct stats sp, sf, sr, sw, sq = { 0, 0, 0, 0 };
		summarize(s->pair, iters, s->run_s, &sp);
		summarize(s->filt, iters, s->run_s, &sf);
		summarize(s->run, iters, 1, &sr);
		summarize(s->wait, iters, 1, &sw);
		if (s->nquiet)
			summarize(s->quiet, s->nquiet, 1, &sq);
		printf("| %s | %.3f | %.3f | %.3f / %.3f | %.3f / %.3f / %.3f | %.3f / %.3f | %d, %.3f / %.3f | %.3f | %.3f | %.0f |\n",
		       s->label, sp.p50, sp.p99, sf.p50, sf.p99, cpu_mean, sr.p50, sr.p99, sw.p50, sw.p99, s->nquiet, sq.p50,
		       sq.p99, s->client_cpu / iters * 1e3, server_ms, sp.per_s);
	}
	printf("\n| build | loaded s | fill s | allocations | RSS MiB filled | after a scrape | at the end | VmHWM MiB "
	       "since loaded | /metrics MiB | its ms / server CPU ms |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|\n");
	for (int k = 0; k < nsrv; k++) {
		struct scale_srv *s = &srv[k];
		printf("| %s | %.1f | %.1f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f / %.0f |\n", s->label, s->load_s,
		       s->fill_s, s->allocs, s->filled_rss, s->scraped_rss, s->end_rss, s->hwm, s->scrape_mib, s->scrape_ms,
		       s->scrape_cpu_ms);
	}
	printf("\n");
	for (int k = 0; k < nsrv; k++) {
		double f[2], p[2];
		slow_counts(&srv[k], 0, f);
		slow_counts(&srv[k], 1, p);
		printf("%s, the server's own times (its histogram): filters over 1 ms %.0f, over 2.5 ms %.0f; prioritizes "
		       "over 1 ms %.0f, over 2.5 ms %.0f (of %d each)\n", srv[k].label, f[0], f[1], p[0], p[1], iters);
	}
}

/* Milliseconds between the scrapes of --scrape-every during the samples; 0: none. */
static int scrape_every_ms;

/*
 * A Prometheus of its own (a process): GET /metrics of each server in
 * turn, every scrape_every_ms, on a new connection each time (as a scraper
 * that does not keep one), until killed. 0 when not asked for.
 */
static pid_t start_scraper(const struct scale_srv *srv, int nsrv)
{
	if (!scrape_every_ms)
		return 0;
	fflush(NULL);
	pid_t p = fork();
	if (p)
		return p;
	for (int k = 0;; k = (k + 1) % nsrv) {
		usleep((useconds_t)scrape_every_ms * 1000);
		CURL *h = client();
		get(h, srv[k].url[3]);
		curl_easy_cleanup(h);
	}
}

static void http_scale(const char *extender, const char *baseline, int nodes, int per_node, int iters)
{
	char inv[] = "/tmp/gpu-bench-XXXXXX";
	int fd = mkstemp(inv);
	if (fd < 0) {
		perror("mkstemp");
		exit(1);
	}
	close(fd);
	write_inventory(inv, nodes, false);
	struct scale_srv srv[2] = { { .label = "this build" }, { .label = "baseline" } };
	int nsrv = baseline ? 2 : 1;
	for (int k = 0; k < nsrv; k++)
		scale_start(&srv[k], k ? baseline : extender, inv, iters);
	unlink(inv);
	for (int k = 0; k < nsrv; k++)
		scale_fill(&srv[k], nodes, per_node);

	struct buf page, fb, reply;
	buf_init(&page, (size_t)1 << 30);
	buf_init(&fb, 1 << 26);
	buf_init(&reply, 1 << 26);
	for (int k = 0; k < nsrv; k++) {
		srv[k].h = client();
		scrape(&srv[k], &page);   /* as Prometheus would, once */
		srv[k].allocs = page_value(buf_cstr(&page), "gpu_extender_cache_allocations");
		srv[k].before = served_on(buf_cstr(&page));
		srv[k].scraped_rss = rss_of(srv[k].pid);
	}
	int percent, count = nodes_to_score(nodes, &percent);
	int *idx = malloc((size_t)nodes * sizeof(*idx));
	double *base = malloc((size_t)iters * sizeof(*base));
	for (int i = 0; i < nodes; i++)
		idx[i] = i;
	uint64_t rng = 0x9E3779B97F4A7C15ULL;
	const int warm = 20;
	double run0 = 0;
	pid_t scraper = start_scraper(srv, nsrv);
	/* Each pod's arguments go to every server, the order alternating, so that both see the same moments. */
	for (int i = -warm; i < iters; i++) {
		if (i == 0)
			run0 = now_s();
		char uid[48];
		snprintf(uid, sizeof(uid), "uid-scale-%d", i + warm);
		random_args(&fb, idx, nodes, count, &rng, uid);
		for (int k = 0; k < nsrv; k++)
			scale_sample(&srv[(k + i + warm) % nsrv], i, &fb, &reply);
	}
	double run_s = now_s() - run0;
	if (scraper) {
		kill(scraper, SIGKILL);
		waitpid(scraper, NULL, 0);
	}
	for (int k = 0; k < nsrv; k++) {
		srv[k].run_s = run_s / nsrv;
		srv[k].end_rss = rss_of(srv[k].pid);
		srv[k].hwm = status_mib(srv[k].pid, "VmHWM:");
	}
	for (int k = 0; k < nsrv; k++) {
		struct buf end;
		buf_init(&end, (size_t)1 << 30);
		double ms = srv[k].scrape_ms, cpu = srv[k].scrape_cpu_ms;
		scrape(&srv[k], &end);
		srv[k].scrape_ms = (srv[k].scrape_ms + ms) / 2, srv[k].scrape_cpu_ms = (srv[k].scrape_cpu_ms + cpu) / 2;
		srv[k].after = served_on(buf_cstr(&end));
		buf_release(&end);
	}
	for (int i = 0; i < iters; i++) {
		double t = now_s();
		get(srv[0].h, srv[0].url[2]);
		get(srv[0].h, srv[0].url[2]);
		base[i] = now_s() - t;
	}
	for (int k = 0; k < nsrv; k++) {
		curl_easy_cleanup(srv[k].h);
		kill(srv[k].pid, SIGTERM);
		waitpid(srv[k].pid, NULL, 0);
	}

	struct stats sb;
	summarize(base, iters, 1, &sb);
	printf("http-scale: a real `gpu-extender serve` (standalone, its inventory file) at %d nodes x 8 GPUs%s\n", nodes,
	       baseline ? ", and the baseline build's, driven in turns" : "");
	printf("  inventory loaded and ready in %.1f s, peak RSS %.1f MiB while loading it\n", srv[0].load_s,
	       srv[0].load_peak);
	printf("  %d allocations (%d a node, shares of 8000 MiB) placed by its own filter and bind, two connections: "
	       "%.1f s; the cache holds %.0f\n", nodes * per_node, per_node, srv[0].fill_s, srv[0].allocs);
	printf("  each filter names %d nodes drawn at random: kube-scheduler's percentageOfNodesToScore unset, "
	       "max(5, 50 - %d/125) = %d %%; prioritize names the nodes the filter passed (%.0f on average)\n",
	       count, nodes, percent, (double)srv[0].passed / iters);
	printf("  one pod wanting 2 whole GPUs, policy %s, one keep-alive connection a server, %d samples after %d "
	       "untimed; 2 x GET /healthz on the same connection p50 %.3f / p99 %.3f ms\n",
	       bench_policy, iters, warm, sb.p50, sb.p99);
	if (scrape_every_ms)
		printf("  during the samples, GET /metrics of each server in turn every %d ms, a connection each (the "
		       "server CPU of a pair then counts a scrape's that overlaps it)\n", scrape_every_ms);
	printf("\n");
	scale_report(srv, nsrv, iters);
	printf("\nserver CPU: the server's threads' time on a CPU during the pair (schedstat, ns); its wait: their time\n"
	       "runnable with no CPU free; pairs that waited for no CPU: those where neither the server nor the client\n"
	       "waited over 0.1 ms for one (what a quiet machine shows); server ms: its own mean time a pair (its /metrics).\n"
	       "RSS filled: before any /metrics; after a scrape: one GET /metrics (65,000 nodes' series); VmHWM: the peak\n"
	       "from the inventory loaded on (/proc/PID/clear_refs), the inventory's parse not counted\n");
	printf("goals: filter+prioritize p99 under 2 ms, RSS under 256 MiB at 65000 nodes with 520k allocations\n");
	buf_release(&page);
	buf_release(&fb);
	buf_release(&reply);
	free(idx);
	free(base);
	for (int k = 0; k < nsrv; k++) {
		free(srv[k].pair), free(srv[k].filt), free(srv[k].run), free(srv[k].wait), free(srv[k].quiet);
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: bench [--extender PATH] [--nodes N] [--iters N] [--policy NAME] [--in-process]\n"
			"       bench --scale [--allocs PER_NODE] [--busy] [--labels N] [--nodes N] [--iters N] [--policy NAME]\n"
			"       bench --http-scale [--extender PATH] [--baseline-extender PATH] [--scrape-every MS] [--nodes 65000] [--allocs 8] [--iters 2000] [--policy NAME]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *extender = "build/gpu-extender", *baseline = NULL;
	int only_nodes = 0, iters_override = 0;
	bool in_process_only = false, scale_only = false, http_scale_only = false;
	int per_node = 8;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--in-process"))
			in_process_only = true;
		else if (!strcmp(argv[i], "--scale"))
			scale_only = true;
		else if (!strcmp(argv[i], "--http-scale"))
			http_scale_only = true;
		else if (!strcmp(argv[i], "--busy"))
			bench_busy = true;
		else if (i + 1 >= argc)
			usage();
		else if (!strcmp(argv[i], "--extender"))
			extender = argv[++i];
		else if (!strcmp(argv[i], "--baseline-extender"))
			baseline = argv[++i];
		else if (!strcmp(argv[i], "--nodes"))
			only_nodes = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--iters"))
			iters_override = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--policy"))
			bench_policy = argv[++i];
		else if (!strcmp(argv[i], "--scrape-every"))
			scrape_every_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--allocs"))
			per_node = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--labels")) {
			bench_labels = atoi(argv[++i]);
			if (bench_labels < 0 || bench_labels > NODE_LABELS_MAX)
				usage();
		} else
			usage();
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	jsonarena_install();
	if (http_scale_only) {
		http_scale(extender, baseline, only_nodes ? only_nodes : 65000, per_node, iters_override ? iters_override : 2000);
		curl_global_cleanup();
		return 0;
	}
	if (scale_only) {
		scale(only_nodes, per_node, iters_override);
		curl_global_cleanup();
		return 0;
	}
	/*
	 * Cluster sizes; the starred have every node in a state of its own, and
	 * the last asks for a share of a GPU, which a node's counts do not
	 * answer (fit_whole_applies): every node's devices are read.
	 */
	static const struct { int nodes; bool distinct, shared; } runs[] = {
		{ 100, false, false }, { 1000, false, false }, { 5000, false, false },
		{ 5000, true, false }, { 5000, true, true },
	};
	printf("filter+prioritize of one 2-GPU pod, policy %s, 8 GPUs per node (one request pair per sample)\n\n",
	       bench_policy);
	printf("%-6s %-11s %7s | %9s %9s %9s %10s %8s | %-26s %9s %9s\n", "nodes", "path", "samples",
	       "p50 ms", "p99 ms", "pairs/s", "server ms", "RSS MiB", "baseline", "p50 ms", "p99 ms");
	for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
		int nodes = only_nodes ? only_nodes : runs[k].nodes;
		bool distinct = runs[k].distinct;
		if (only_nodes && k > 0 && !distinct)
			continue;
		int iters = iters_override ? iters_override : nodes >= 5000 ? 400 : nodes >= 1000 ? 1000 : 3000;
		char inv[] = "/tmp/gpu-bench-XXXXXX", label[16];
		int fd = mkstemp(inv);
		if (fd < 0) {
			perror("mkstemp");
			return 1;
		}
		close(fd);
		write_inventory(inv, nodes, distinct);
		bench_limits = runs[k].shared ? SHARED_GPU : WHOLE_GPUS;
		snprintf(label, sizeof(label), "%d%s%s", nodes, distinct ? "*" : "", runs[k].shared ? "s" : "");
		struct stats v, b;
		in_process(inv, nodes, iters, &v, &b);
		printf("%-6s %-11s %7d | %9.3f %9.3f %9.0f %10s %8s | %-26s %9.3f %9.3f\n", label, "in-process", iters,
		       v.p50, v.p99, v.per_s, "", "", "JSON parse of the 2 bodies", b.p50, b.p99);
		if (!in_process_only) {
			double two, rss;
			over_http(extender, inv, nodes, iters, &v, &b, &two, &rss);
			printf("%-6s %-11s %7d | %9.3f %9.3f %9.0f %10.3f %8.1f | %-26s %9.3f %9.3f\n", label, "http",
			       iters, v.p50, v.p99, v.per_s, v.server_ms, rss, "2 x GET /healthz", b.p50, b.p99);
			printf("%-6s %-11s %7s | %9s %9s %9.0f %10s %8s |\n", label, "http 2 conn", "", "", "", two, "", "");
		}
		unlink(inv);
	}
	printf("\n* every node in a state of its own (no two alike), the worst case for the per-state memo\n");
	printf("s a pod asking for a share of a GPU (10000 MiB), which every node's devices are read for\n");
	printf("\ngoal: 5000 nodes, http p99 under 1 ms with every node in a state of its own (5000*)\n");
	curl_global_cleanup();
	return 0;
}
