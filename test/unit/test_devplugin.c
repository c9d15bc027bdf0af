/*
 * The device plugin: gRPC framing and a real h2c round trip over a unix
 * socket (our server, our client), the inventory over a fake device root
 * (character devices made with mknod, a fake /proc/driver/nvidia and
 * sysfs), the ListAndWatch lists, pod parsing, matching kubelet's calls
 * to pods, the container responses of each delivery mode, and CDI.
 */
#include "testutil.h"

#include "devplugin.h"
#include "h2rpc.h"
#include "ledger.h"
#include "metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* ---- helpers ---- */

static char root[256];

static void mkdirs(const char *path)
{
	char tmp[512];
	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(tmp, 0755);
			*p = '/';
		}
	mkdir(tmp, 0755);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* A character device under root; false when this system will not make one (not root). */
static bool mkchar(const char *rel, unsigned major, unsigned minor)
{
	char path[512];
	snprintf(path, sizeof(path), "%s%s", root, rel);
	char dir[512];
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	mkdirs(dir);
	return !mknod(path, S_IFCHR | 0666, makedev(major, minor)) || errno == EEXIST;
}

static void rm_tree(const char *path)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	assert_int_equal(system(cmd), 0);
}

/* n NVIDIA GPUs (ids 0..n-1, UUIDs GPU-000n, PCI 0000:1n:00.0) and m AMD ones (ids 100..). */
static struct agent_node *node_of(int n, int m)
{
	struct agent_node *node = calloc(1, sizeof(*node));
	assert_non_null(node);
	snprintf(node->name, sizeof(node->name), "n1");
	for (int i = 0; i < n + m; i++) {
		struct agent_device *d = &node->dev[node->ndev++];
		bool amd = i >= n;
		d->id = amd ? 100 + i - n : i;
		d->parent_id = -1;
		agent_gpu_init(&d->g, amd ? GPU_VENDOR_AMD : GPU_VENDOR_NVIDIA, amd ? i - n : i);
		d->g.health = GPU_HEALTHY;
		snprintf(d->g.uuid, sizeof(d->g.uuid), "%s-%04d", amd ? "GPU-amd" : "GPU", i);
		snprintf(d->g.pci_bus, sizeof(d->g.pci_bus), amd ? "0000:c%d:00.0" : "00000000:1%d:00.0", amd ? i - n : i);
	}
	return node;
}

/* A fake device root for node_of(n, m): NVIDIA minors are the index + 4 (from /proc). */
static bool fake_root(int n, int m)
{
	snprintf(root, sizeof(root), "/tmp/dp-test.%d", (int)getpid());
	rm_tree(root);
	mkdirs(root);
	if (!mkchar("/dev/nvidiactl", 195, 255) || !mkchar("/dev/nvidia-uvm", 511, 0))
		return false;
	for (int i = 0; i < n; i++) {
		char p[256], info[128];
		snprintf(p, sizeof(p), "%s/proc/driver/nvidia/gpus/0000:1%d:00.0", root, i);
		mkdirs(p);
		snprintf(info, sizeof(info), "Model: \t\t NVIDIA A100\nDevice Minor: \t %d\n", i + 4);
		strcat(p, "/information");
		write_file(p, info);
		snprintf(p, sizeof(p), "/dev/nvidia%d", i + 4);
		mkchar(p, 195, (unsigned)i + 4);
	}
	if (m)
		mkchar("/dev/kfd", 234, 0);
	for (int i = 0; i < m; i++) {
		char p[256];
		snprintf(p, sizeof(p), "%s/sys/bus/pci/devices/0000:c%d:00.0/drm/renderD%d", root, i, 128 + i);
		mkdirs(p);
		snprintf(p, sizeof(p), "%s/sys/bus/pci/devices/0000:c%d:00.0/drm/card%d", root, i, i);
		mkdirs(p);
		snprintf(p, sizeof(p), "/dev/dri/renderD%d", 128 + i);
		mkchar(p, 226, (unsigned)(128 + i));
		snprintf(p, sizeof(p), "/dev/dri/card%d", i);
		mkchar(p, 226, (unsigned)i);
	}
	return true;
}

/* A configuration whose devices are under dev_root, seen through host_root. */
static const struct dp_config *cfg_rooted(const char *dev_root, const char *host_root)
{
	static struct dp_config cfg;
	dp_config_default(&cfg);
	snprintf(cfg.device_root, sizeof(cfg.device_root), "%s", dev_root);
	snprintf(cfg.host_root, sizeof(cfg.host_root), "%s", host_root);
	return &cfg;
}

static struct dp_inventory *inventory_of(int n, int m)
{
	if (!fake_root(n, m))
		skip();
	struct agent_node *node = node_of(n, m);
	struct dp_inventory *inv = malloc(sizeof(*inv));
	assert_non_null(inv);
	dp_inventory_build(inv, node, cfg_rooted(root, ""));
	free(node);
	return inv;
}

/* A pod bound to n1 with whole GPUs ids, one container asking count of r. */
static struct dp_pod pod_of(const char *uid, uint64_t seen, const int *ids, int nids, enum dp_resource r, int count)
{
	struct dp_pod p;
	memset(&p, 0, sizeof(p));
	snprintf(p.uid, sizeof(p.uid), "%s", uid);
	snprintf(p.ns, sizeof(p.ns), "ml");
	snprintf(p.name, sizeof(p.name), "pod-%s", uid);
	p.seen = seen;
	p.nids = nids;
	memcpy(p.ids, ids, (size_t)nids * sizeof(int));
	p.ncontainers = 1;
	snprintf(p.c[0].name, sizeof(p.c[0].name), "main");
	p.c[0].want[r] = count;
	return p;
}

/* ---- framing ---- */

static void test_frame_roundtrip(void **state)
{
	(void)state;
	struct buf b;
	buf_init(&b, 1024);
	assert_int_equal(h2rpc_frame(&b, (const uint8_t *)"hello", 5), 0);
	assert_int_equal(b.len, 10);
	assert_int_equal((unsigned char)b.data[4], 5);
	const uint8_t *msg;
	size_t len;
	char err[128];
	assert_int_equal(h2rpc_unframe((const uint8_t *)b.data, b.len, &msg, &len, err, sizeof(err)), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(msg, "hello", 5);
	/* cut short, trailing bytes, compressed */
	assert_int_equal(h2rpc_unframe((const uint8_t *)b.data, 7, &msg, &len, err, sizeof(err)), -1);
	assert_int_equal(buf_add(&b, "x", 1), 0);
	assert_int_equal(h2rpc_unframe((const uint8_t *)b.data, b.len, &msg, &len, err, sizeof(err)), -1);
	b.data[0] = 1;
	assert_int_equal(h2rpc_unframe((const uint8_t *)b.data, 10, &msg, &len, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "compressed"));
	/* an empty body is an empty message */
	assert_int_equal(h2rpc_unframe((const uint8_t *)b.data, 0, &msg, &len, err, sizeof(err)), 0);
	assert_int_equal(len, 0);
	buf_release(&b);
}

static void test_percent_encoding(void **state)
{
	(void)state;
	char enc[128], dec[128];
	h2rpc_pct_encode("100% sure\ncafé", enc, sizeof(enc));
	assert_string_equal(enc, "100%25 sure%0Acaf%C3%A9");
	h2rpc_pct_decode(enc, strlen(enc), dec, sizeof(dec));
	assert_string_equal(dec, "100% sure\ncafé");
	h2rpc_pct_decode("bad %zz and %4", 14, dec, sizeof(dec));
	assert_string_equal(dec, "bad %zz and %4");
}

/* ---- a real h2c round trip ---- */

struct echo_server {
	struct h2rpc_server *srv;
	pthread_t thread;
	atomic_bool stop;
	int calls;
	atomic_int closed;          /* polled by the test while the server thread counts */
};

static void echo_request(void *ctx, const struct h2rpc_request *req)
{
	struct echo_server *e = ctx;
	e->calls++;
	if (!strcmp(req->path, "/test.Echo/Say")) {
		h2rpc_reply(e->srv, req->ref, req->msg, req->len);
	} else if (!strcmp(req->path, "/test.Echo/Big")) {
		size_t n = (size_t)1 << 20;     /* more than one flow-control window */
		uint8_t *big = malloc(n);
		assert_non_null(big);
		for (size_t i = 0; i < n; i++)
			big[i] = (uint8_t)(i * 7);
		h2rpc_reply(e->srv, req->ref, big, n);
		free(big);
	} else if (!strcmp(req->path, "/test.Echo/Stream")) {
		h2rpc_send(e->srv, req->ref, (const uint8_t *)"one", 3);   /* left open: a watch */
	} else {
		h2rpc_finish(e->srv, req->ref, H2RPC_UNIMPLEMENTED, "no such method: 100% sure");
	}
}

static void echo_closed(void *ctx, struct h2rpc_ref ref)
{
	(void)ref;
	((struct echo_server *)ctx)->closed++;
}

static void *echo_main(void *arg)
{
	struct echo_server *e = arg;
	while (!atomic_load(&e->stop))
		h2rpc_serve(e->srv, 100);
	return NULL;
}

static void test_h2c_roundtrip(void **state)
{
	(void)state;
	char sock[128], err[256];
	snprintf(sock, sizeof(sock), "/tmp/h2rpc-test.%d.sock", (int)getpid());
	struct echo_server e = { 0 };
	struct h2rpc_server_ops ops = { echo_request, echo_closed, &e };
	e.srv = h2rpc_server_new(&ops);
	assert_non_null(e.srv);
	int lis = h2rpc_listen(e.srv, sock, err, sizeof(err));
	assert_true(lis >= 0);
	assert_true(h2rpc_listener_intact(e.srv, lis));
	assert_int_equal(pthread_create(&e.thread, NULL, echo_main, &e), 0);

	struct buf resp;
	buf_init(&resp, H2RPC_MAX_MESSAGE);
	assert_int_equal(h2rpc_call(sock, "/test.Echo/Say", (const uint8_t *)"ping", 4, &resp, 5000, err, sizeof(err)),
			 0);
	assert_int_equal(resp.len, 4);
	assert_memory_equal(resp.data, "ping", 4);
	/* an empty message both ways */
	assert_int_equal(h2rpc_call(sock, "/test.Echo/Say", NULL, 0, &resp, 5000, err, sizeof(err)), 0);
	assert_int_equal(resp.len, 0);
	/* larger than the initial flow-control window */
	assert_int_equal(h2rpc_call(sock, "/test.Echo/Big", NULL, 0, &resp, 5000, err, sizeof(err)), 0);
	assert_int_equal(resp.len, (size_t)1 << 20);
	assert_int_equal((uint8_t)resp.data[12345], (uint8_t)(12345 * 7));
	/* a gRPC error arrives as the status, with its (percent-encoded) message decoded */
	assert_int_equal(h2rpc_call(sock, "/test.Echo/Nope", NULL, 0, &resp, 5000, err, sizeof(err)),
			 H2RPC_UNIMPLEMENTED);
	assert_string_equal(err, "no such method: 100% sure");
	/* a stream that never finishes: the client gives up at its deadline, the server sees it close */
	assert_int_equal(h2rpc_call(sock, "/test.Echo/Stream", NULL, 0, &resp, 300, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "no answer within"));
	for (int i = 0; i < 50 && !e.closed; i++)
		usleep(20000);
	assert_int_equal(e.closed, 1);
	/* no server */
	assert_int_equal(h2rpc_call("/tmp/no-such-h2rpc.sock", "/x/y", NULL, 0, &resp, 500, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "No such file"));

	atomic_store(&e.stop, true);
	h2rpc_wake(e.srv);
	pthread_join(e.thread, NULL);
	assert_int_equal(e.calls, 5);
	h2rpc_server_free(e.srv);
	assert_int_equal(access(sock, F_OK), -1);      /* the socket file went with the listener */
	buf_release(&resp);
}

/* ---- the inventory ---- */

static void test_inventory_device_files(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 1);
	assert_int_equal(inv->ndev, 3);
	const struct dp_device *g0 = &inv->dev[0], *a0 = &inv->dev[2];
	assert_true(g0->healthy);
	assert_string_equal(g0->kubelet_id, "GPU-0000");
	assert_int_equal(g0->nnode, 1);
	assert_string_equal(g0->node[0].path, "/dev/nvidia4");     /* the minor from /proc, not the index */
	assert_true(strstr(g0->node[0].host_path, root) == g0->node[0].host_path);
	assert_true(a0->healthy);
	assert_int_equal(a0->id, 100);
	assert_int_equal(a0->nnode, 2);
	assert_string_equal(a0->node[0].path, "/dev/dri/card0");
	assert_string_equal(a0->node[1].path, "/dev/dri/renderD128");
	/* common files: nvidiactl, nvidia-uvm; kfd */
	assert_int_equal(inv->ncommon, 3);
	assert_int_equal(dp_inventory_find(inv, 100), 2);
	assert_int_equal(dp_inventory_find_kubelet_id(inv, "GPU-0001"), 1);
	assert_int_equal(dp_inventory_find(inv, 7), -1);

	/* a device file that goes away makes the device unhealthy, with the reason */
	char p[512];
	snprintf(p, sizeof(p), "%s/dev/nvidia5", root);
	unlink(p);
	struct agent_node *node = node_of(2, 1);
	struct dp_inventory *inv2 = malloc(sizeof(*inv2));
	dp_inventory_build(inv2, node, cfg_rooted(root, ""));
	assert_false(inv2->dev[1].healthy);
	assert_non_null(strstr(inv2->dev[1].why, "device file"));
	assert_false(dp_inventory_same(inv, inv2));
	/* no nvidiactl: no NVIDIA device can be used */
	snprintf(p, sizeof(p), "%s/dev/nvidiactl", root);
	unlink(p);
	dp_inventory_build(inv2, node, cfg_rooted(root, ""));
	assert_false(inv2->dev[0].healthy);
	assert_non_null(strstr(inv2->dev[0].why, "nvidiactl"));
	assert_true(inv2->dev[2].healthy);
	/* an unhealthy GPU stays unhealthy, with the detector's reason */
	node->dev[2].g.health = GPU_UNHEALTHY;
	snprintf(node->dev[2].g.health_reason, sizeof(node->dev[2].g.health_reason), "ECC errors");
	dp_inventory_build(inv2, node, cfg_rooted(root, ""));
	assert_false(inv2->dev[2].healthy);
	assert_non_null(strstr(inv2->dev[2].why, "ECC"));
	free(node);
	free(inv2);
	free(inv);
	rm_tree(root);
}

/* In production the host's / is mounted in the agent's container: the paths kubelet
 * gets are the host's, the files are looked at through the mount. */
static void test_inventory_host_root(void **state)
{
	(void)state;
	if (!fake_root(1, 0))
		skip();
	struct agent_node *node = node_of(1, 0);
	struct dp_inventory *inv = malloc(sizeof(*inv));
	dp_inventory_build(inv, node, cfg_rooted("", root));
	assert_true(inv->dev[0].healthy);
	assert_string_equal(inv->dev[0].node[0].host_path, "/dev/nvidia4");
	assert_string_equal(inv->common[0].host_path, "/dev/nvidiactl");
	free(inv);
	free(node);
	rm_tree(root);
}

static void test_inventory_kubelet_ids(void **state)
{
	(void)state;
	struct agent_node *node = node_of(2, 0);
	snprintf(node->dev[1].g.uuid, sizeof(node->dev[1].g.uuid), "not a/valid id");
	struct dp_inventory *inv = malloc(sizeof(*inv));
	dp_inventory_build(inv, node, cfg_rooted("/nonexistent-root", ""));
	assert_string_equal(inv->dev[0].kubelet_id, "GPU-0000");
	assert_string_equal(inv->dev[1].kubelet_id, "gpu-1");
	assert_false(inv->dev[0].healthy);       /* no device files under that root */
	free(inv);
	free(node);
}

static void test_resource_lists(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 0);
	struct dp_config cfg;
	dp_config_default(&cfg);
	cfg.share_slots = 3;
	cfg.claim_tickets = 4;
	int n;
	struct dp_kdev *l = dp_resource_devices(inv, &cfg, DP_GPU, &n);
	assert_int_equal(n, 2);
	assert_string_equal(l[1].id, "GPU-0001");
	assert_true(l[1].healthy);
	free(l);
	l = dp_resource_devices(inv, &cfg, DP_SHARE, &n);
	assert_int_equal(n, 6);
	assert_string_equal(l[0].id, "GPU-0000::0");
	assert_string_equal(l[5].id, "GPU-0001::2");
	char dev[64];
	assert_true(dp_slot_device(l[5].id, dev, sizeof(dev)));
	assert_string_equal(dev, "GPU-0001");
	assert_false(dp_slot_device("GPU-0001", dev, sizeof(dev)));
	assert_false(dp_slot_device("::3", dev, sizeof(dev)));
	free(l);
	l = dp_resource_devices(inv, &cfg, DP_CLAIM, &n);
	assert_int_equal(n, 4);
	assert_string_equal(l[3].id, "claim-3");
	free(l);
	/* no devices: empty lists */
	inv->ndev = 0;
	assert_null(dp_resource_devices(inv, &cfg, DP_CLAIM, &n));
	assert_int_equal(n, 0);
	assert_string_equal(dp_resource_name(DP_SHARE), "gpu.scheduling/gpu-share");
	enum dp_delivery d;
	assert_true(dp_delivery_parse("volume-mounts", &d));
	assert_int_equal(d, DP_DELIVERY_VOLUME_MOUNTS);
	assert_false(dp_delivery_parse("envvar", &d));
	free(inv);
	rm_tree(root);
}

/* ---- pods ---- */

static const char *pod_json =
	"{\"metadata\":{\"name\":\"train\",\"namespace\":\"ml\",\"uid\":\"u-1\","
	"\"creationTimestamp\":\"2026-01-02T03:04:05Z\",\"annotations\":{"
	"\"gpu.scheduling/allocated\":\"n1:3,1\",\"gpu.scheduling/device-uuids\":\"GPU-0003,GPU-0001\"}},"
	"\"spec\":{\"nodeName\":\"n1\",\"initContainers\":[{\"name\":\"init\",\"resources\":{\"limits\":"
	"{\"gpu.scheduling/gpu\":\"1\"}}}],\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":"
	"{\"gpu.scheduling/gpu\":\"2\",\"cpu\":\"1\"}}},{\"name\":\"b\"}]},"
	"\"status\":{\"phase\":\"Pending\"}}";

/*
 * The allocation annotations' format version: none (0.2.0's pods) and 1
 * are read; a newer one gets the pod no devices rather than ones the
 * annotations may no longer mean, and says why.
 */
static void test_pod_allocation_version(void **state)
{
	(void)state;
	cJSON *j = cJSON_Parse(pod_json);
	cJSON *ann = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metadata"), "annotations");
	struct dp_pod p;
	char err[200] = "";
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), 1);
	cJSON_AddStringToObject(ann, "gpu.scheduling/allocation-version", "1");
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), 1);
	assert_int_equal(p.nids, 2);
	cJSON_ReplaceItemInObject(ann, "gpu.scheduling/allocation-version", cJSON_CreateString("2"));
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "gpu.scheduling/allocation-version 2 is newer than this program reads"));
	cJSON_ReplaceItemInObject(ann, "gpu.scheduling/allocation-version", cJSON_CreateString("v2"));
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "is not a format version"));
	/* another node's pod stays none of ours, whatever its version */
	assert_int_equal(dp_pod_parse(j, "n2", &p, err, sizeof(err)), 0);
	cJSON_Delete(j);
}

static void test_pod_parse(void **state)
{
	(void)state;
	cJSON *j = cJSON_Parse(pod_json);
	struct dp_pod p;
	char err[200];
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), 1);
	assert_string_equal(p.uid, "u-1");
	assert_int_equal(p.nids, 2);
	assert_int_equal(p.ids[0], 3);
	assert_string_equal(p.uuids[1], "GPU-0001");
	assert_int_equal(p.created, 1767323045);
	assert_false(p.admitted);
	assert_false(p.shared);
	assert_int_equal(p.ncontainers, 3);
	assert_true(p.c[0].init);
	assert_int_equal(p.c[0].want[DP_GPU], 1);
	assert_int_equal(p.c[1].want[DP_GPU], 2);
	assert_int_equal(p.c[2].want[DP_GPU], 0);
	/* another node's pod is none of ours */
	assert_int_equal(dp_pod_parse(j, "n2", &p, err, sizeof(err)), 0);
	/* running: kubelet admitted it */
	cJSON *st = cJSON_GetObjectItem(j, "status");
	cJSON_ReplaceItemInObject(st, "phase", cJSON_CreateString("Running"));
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), 1);
	assert_true(p.admitted);
	/* shares; malformed annotations */
	cJSON *ann = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "metadata"), "annotations");
	cJSON_AddStringToObject(ann, "gpu.scheduling/shared-memory-mib", "8192");
	cJSON_AddStringToObject(ann, "gpu.scheduling/shared-core-percent", "30");
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), 1);
	assert_true(p.shared);
	assert_int_equal(p.mem_mib, 8192);
	assert_int_equal(p.core_pct, 30);
	static const char *const bad[] = { "n1:", "n1:1,,2", "n1:x", "n1:1,", "n1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cJSON_ReplaceItemInObject(ann, "gpu.scheduling/allocated", cJSON_CreateString(bad[i]));
		assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), -1);
		assert_non_null(strstr(err, "gpu.scheduling/allocated"));
	}
	cJSON_ReplaceItemInObject(ann, "gpu.scheduling/allocated", cJSON_CreateString("n1:1,2,3"));
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), -1);      /* three ids, two uuids */
	assert_non_null(strstr(err, "device-uuids"));
	cJSON_Delete(j);
}

static void test_pods_store(void **state)
{
	(void)state;
	char err[128];
	struct dp_pods *ps = dp_pods_start(NULL, "n1", err, sizeof(err));
	assert_non_null(ps);
	int ids[] = { 0 };
	struct dp_pod a = pod_of("a", 0, ids, 1, DP_GPU, 1);
	dp_pods_put(ps, &a);
	dp_pods_mark_done(ps, "a", 0, DP_GPU);
	a.created = 5;                  /* an update keeps what kubelet already took */
	dp_pods_put(ps, &a);
	assert_true(dp_pods_mark_named(ps, "ml", "pod-a", "main", DP_SHARE));
	assert_false(dp_pods_mark_named(ps, "ml", "pod-a", "other", DP_SHARE));
	int n;
	struct dp_pod *copy = dp_pods_copy(ps, &n);
	assert_int_equal(n, 1);
	assert_true(copy[0].c[0].done[DP_GPU]);
	assert_true(copy[0].c[0].done[DP_SHARE]);
	assert_int_equal(copy[0].created, 5);
	free(copy);
	assert_int_equal(dp_pods_refresh(ps, err, sizeof(err)), -1);   /* no API server here */
	dp_pods_stop(ps);
}

/* ---- matching ---- */

static void test_prefer_whole(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(4, 0);
	int ia[] = { 2, 3 }, ib[] = { 0, 1 };
	struct dp_pod pods[2] = { pod_of("b", 2, ib, 2, DP_GPU, 2), pod_of("a", 1, ia, 2, DP_GPU, 2) };
	const char *avail[] = { "GPU-0000", "GPU-0001", "GPU-0002", "GPU-0003" };
	struct dp_choice ch;
	char why[256];
	/* the first seen pod is the one kubelet admits first */
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, 2, NULL, avail, 4, NULL, 0, 2, &ch, why, sizeof(why)), 0);
	assert_int_equal(ch.pod, 1);
	assert_int_equal(ch.nid, 2);
	assert_string_equal(ch.id[0], "GPU-0002");
	assert_string_equal(ch.id[1], "GPU-0003");
	dp_choice_release(&ch);
	/* once a's devices are taken, b */
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, 2, NULL, avail, 2, NULL, 0, 2, &ch, why, sizeof(why)), 0);
	assert_int_equal(ch.pod, 0);
	dp_choice_release(&ch);
	/* the pod of the last call first, while it waits */
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, 2, "b", avail, 4, NULL, 0, 2, &ch, why, sizeof(why)), 0);
	assert_int_equal(ch.pod, 0);
	dp_choice_release(&ch);
	/* a pod kubelet already gave its devices is done */
	pods[1].c[0].done[DP_GPU] = true;
	pods[0].admitted = true;
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, 2, NULL, avail, 4, NULL, 0, 2, &ch, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "no pod bound"));
	/* a size nobody waits for */
	pods[0].admitted = false;
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, 2, NULL, avail, 4, NULL, 0, 1, &ch, why, sizeof(why)), -1);
	/* must-include (an init container's devices) must be the pod's own */
	const char *must_ok[] = { "GPU-0001" }, *must_bad[] = { "GPU-0003" };
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, 2, NULL, avail, 4, must_ok, 1, 2, &ch, why, sizeof(why)), 0);
	assert_string_equal(ch.id[0], "GPU-0001");
	assert_string_equal(ch.id[1], "GPU-0000");
	dp_choice_release(&ch);
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, 2, NULL, avail, 4, must_bad, 1, 2, &ch, why, sizeof(why)), -1);
	/* a share never takes a whole GPU */
	pods[0].shared = true;
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, 2, NULL, avail, 4, NULL, 0, 2, &ch, why, sizeof(why)), -1);
	free(inv);
	rm_tree(root);
}

static void test_prefer_shares_and_tickets(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 0);
	int ids[] = { 1 }, two[] = { 0, 1 };
	struct dp_pod pods[2] = { pod_of("s", 1, ids, 1, DP_SHARE, 1), pod_of("c", 2, two, 2, DP_CLAIM, 1) };
	pods[0].shared = true;
	const char *slots[] = { "GPU-0000::0", "GPU-0001::2", "GPU-0001::1", "GPU-0000::1" };
	struct dp_choice ch;
	char why[256];
	assert_int_equal(dp_prefer(inv, DP_SHARE, pods, 2, NULL, slots, 4, NULL, 0, 1, &ch, why, sizeof(why)), 0);
	assert_int_equal(ch.pod, 0);
	assert_string_equal(ch.id[0], "GPU-0001::1");       /* the lowest free slot of the bound GPU */
	dp_choice_release(&ch);
	const char *full[] = { "GPU-0000::0" };
	assert_int_equal(dp_prefer(inv, DP_SHARE, pods, 2, NULL, full, 1, NULL, 0, 1, &ch, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "none has its bound devices available"));
	const char *tickets[] = { "claim-7", "claim-2" };
	assert_int_equal(dp_prefer(inv, DP_CLAIM, pods, 2, NULL, tickets, 2, NULL, 0, 1, &ch, why, sizeof(why)), 0);
	assert_int_equal(ch.pod, 1);
	assert_string_equal(ch.id[0], "claim-7");
	dp_choice_release(&ch);
	free(inv);
	rm_tree(root);
}

static void test_match(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(4, 0);
	int ia[] = { 2, 3 }, ib[] = { 0, 1 }, is[] = { 1 };
	struct dp_pod pods[4] = { pod_of("b", 2, ib, 2, DP_GPU, 2), pod_of("a", 1, ia, 2, DP_GPU, 2),
				  pod_of("s", 3, is, 1, DP_SHARE, 1), pod_of("c", 4, ia, 2, DP_CLAIM, 1) };
	pods[2].shared = true;
	struct dp_choice ch;
	char err[512];
	/* the devices kubelet chose name the pod, whatever the order */
	const char *ids_b[] = { "GPU-0001", "GPU-0000" };
	assert_int_equal(dp_match(inv, DP_GPU, pods, 4, "a", ids_b, 2, &ch, err, sizeof(err)), 0);
	assert_int_equal(ch.pod, 0);
	assert_int_equal(ch.ndev, 2);
	assert_int_equal(inv->dev[ch.dev[0]].id, 1);
	/* devices no bound pod holds: refused, with what to do */
	const char *mixed[] = { "GPU-0001", "GPU-0002" };
	assert_int_equal(dp_match(inv, DP_GPU, pods, 4, NULL, mixed, 2, &ch, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "GPU-0001,GPU-0002"));
	assert_non_null(strstr(err, "gpu-scheduler"));
	/* a share slot -> its GPU; a slot on another GPU is refused */
	const char *slot[] = { "GPU-0001::5" }, *other[] = { "GPU-0003::0" };
	assert_int_equal(dp_match(inv, DP_SHARE, pods, 4, NULL, slot, 1, &ch, err, sizeof(err)), 0);
	assert_int_equal(ch.pod, 2);
	assert_int_equal(ch.ndev, 1);
	assert_int_equal(inv->dev[ch.dev[0]].id, 1);
	assert_int_equal(dp_match(inv, DP_SHARE, pods, 4, NULL, other, 1, &ch, err, sizeof(err)), -1);
	/* a claim ticket: the container gets all the claim's devices */
	const char *ticket[] = { "claim-0" };
	assert_int_equal(dp_match(inv, DP_CLAIM, pods, 4, NULL, ticket, 1, &ch, err, sizeof(err)), 0);
	assert_int_equal(ch.pod, 3);
	assert_int_equal(ch.ndev, 2);
	/* a GPU that is another device now than the binding named */
	snprintf(pods[1].uuids[0], sizeof(pods[1].uuids[0]), "GPU-gone");
	const char *ids_a[] = { "GPU-0002", "GPU-0003" };
	assert_int_equal(dp_match(inv, DP_GPU, pods, 4, NULL, ids_a, 2, &ch, err, sizeof(err)), -1);
	free(inv);
	rm_tree(root);
}


/* ---- the guessing rules (finding 3) ---- */

/* A pod on its way out is not admitted by kubelet: never the one it admits. */
static void test_prefer_skips_deleting(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 0);
	cJSON *j = cJSON_Parse(pod_json);
	cJSON_AddStringToObject(cJSON_GetObjectItem(j, "metadata"), "deletionTimestamp", "2026-01-02T03:05:00Z");
	struct dp_pod p;
	char err[200];
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), 1);
	cJSON_Delete(j);
	p.nids = 1;
	p.ids[0] = 1;
	p.uuids[0][0] = '\0';
	const char *avail[] = { "GPU-0000", "GPU-0001" };
	struct dp_choice ch;
	char why[256];
	assert_int_equal(dp_prefer(inv, DP_GPU, &p, 1, NULL, avail, 2, NULL, 0, 1, &ch, why, sizeof(why)), -1);
	const char *ids[] = { "GPU-0001" };
	assert_int_equal(dp_match(inv, DP_GPU, &p, 1, NULL, ids, 1, &ch, err, sizeof(err)), -1);
	/* a pod kubelet refused (Failed, with kubelet's reason) is done with */
	j = cJSON_Parse(pod_json);
	cJSON *st = cJSON_GetObjectItem(j, "status");
	cJSON_ReplaceItemInObject(st, "phase", cJSON_CreateString("Failed"));
	cJSON_AddStringToObject(st, "reason", "OutOfcpu");
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), 1);
	cJSON_Delete(j);
	assert_true(p.finished);
	p.nids = 1;
	p.ids[0] = 1;
	p.uuids[0][0] = '\0';
	assert_int_equal(dp_prefer(inv, DP_GPU, &p, 1, NULL, avail, 2, NULL, 0, 1, &ch, why, sizeof(why)), -1);
	free(inv);
	rm_tree(root);
}

/* A sidecar (restartable init container) keeps its share slot: the main container's
 * slot is on the next bound GPU, not the sidecar's. */
static void test_prefer_sidecar_share(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 0);
	const char *js =
		"{\"metadata\":{\"name\":\"sc\",\"namespace\":\"ml\",\"uid\":\"u-sc\",\"annotations\":{"
		"\"gpu.scheduling/allocated\":\"n1:0,1\",\"gpu.scheduling/shared-memory-mib\":\"1024\"}},"
		"\"spec\":{\"nodeName\":\"n1\",\"initContainers\":[{\"name\":\"side\",\"restartPolicy\":\"Always\","
		"\"resources\":{\"limits\":{\"gpu.scheduling/gpu-share\":\"1\"}}}],"
		"\"containers\":[{\"name\":\"main\",\"resources\":{\"limits\":{\"gpu.scheduling/gpu-share\":\"1\"}}}]},"
		"\"status\":{\"phase\":\"Pending\"}}";
	cJSON *j = cJSON_Parse(js);
	struct dp_pod p;
	char err[200];
	assert_int_equal(dp_pod_parse(j, "n1", &p, err, sizeof(err)), 1);
	cJSON_Delete(j);
	assert_true(p.c[0].init);
	assert_true(p.c[0].restartable);
	const char *slots[] = { "GPU-0000::0", "GPU-0000::1", "GPU-0001::0", "GPU-0001::1" };
	struct dp_choice ch;
	char why[256];
	assert_int_equal(dp_prefer(inv, DP_SHARE, &p, 1, NULL, slots, 4, NULL, 0, 1, &ch, why, sizeof(why)), 0);
	assert_int_equal(ch.container, 0);
	assert_string_equal(ch.id[0], "GPU-0000::0");
	dp_choice_release(&ch);
	p.c[0].done[DP_SHARE] = true;
	assert_int_equal(dp_prefer(inv, DP_SHARE, &p, 1, NULL, slots + 1, 3, NULL, 0, 1, &ch, why, sizeof(why)), 0);
	assert_int_equal(ch.container, 1);
	assert_string_equal(ch.id[0], "GPU-0001::0");       /* the sidecar keeps GPU 0's slot */
	dp_choice_release(&ch);
	free(inv);
	rm_tree(root);
}

/* After kubelet restarts it admits every pod it finds in creation order: two pods
 * bound out of creation order (Y first, then X) are admitted X first. */
static void test_order_after_kubelet_restart(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 0);
	char err[128];
	struct dp_pods *ps = dp_pods_start(NULL, "n1", err, sizeof(err));
	int ix[] = { 0 }, iy[] = { 1 }, iz[] = { 1 };
	struct dp_pod y = pod_of("y", 0, iy, 1, DP_GPU, 1), x = pod_of("x", 0, ix, 1, DP_GPU, 1);
	y.created = 200;
	x.created = 100;
	dp_pods_put(ps, &y);      /* bound first */
	dp_pods_put(ps, &x);
	struct dp_pod z = pod_of("z", 0, iz, 1, DP_GPU, 1);   /* admitted before the restart */
	z.created = 50;
	z.admitted = true;
	dp_pods_put(ps, &z);
	const char *avail[] = { "GPU-0000", "GPU-0001" };
	struct dp_choice ch;
	char why[256];
	int n;
	struct dp_pod *pods = dp_pods_copy(ps, &n);
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, n, NULL, avail, 2, NULL, 0, 1, &ch, why, sizeof(why)), 0);
	assert_string_equal(pods[ch.pod].uid, "y");        /* while kubelet runs: arrival order */
	dp_choice_release(&ch);
	free(pods);
	dp_pods_kubelet_restarted(ps);
	pods = dp_pods_copy(ps, &n);
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, n, NULL, avail, 2, NULL, 0, 1, &ch, why, sizeof(why)), 0);
	assert_string_equal(pods[ch.pod].uid, "x");        /* after: creation order */
	dp_choice_release(&ch);
	free(pods);
	dp_pods_stop(ps);
	free(inv);
	rm_tree(root);
}


/* A node pod as the API server lists it: bound to n1 on one GPU, created at second c, written at rv. */
static cJSON *listed_pod(const char *uid, int gpu, int c, const char *rv)
{
	char js[1024];
	snprintf(js, sizeof(js),
		 "{\"metadata\":{\"name\":\"pod-%s\",\"namespace\":\"ml\",\"uid\":\"%s\",\"resourceVersion\":\"%s\","
		 "\"creationTimestamp\":\"2026-01-02T03:04:%02dZ\",\"annotations\":{"
		 "\"gpu.scheduling/allocated\":\"n1:%d\"}},"
		 "\"spec\":{\"nodeName\":\"n1\",\"containers\":[{\"name\":\"main\",\"resources\":{\"limits\":"
		 "{\"gpu.scheduling/gpu\":\"1\"}}}]},\"status\":{\"phase\":\"Pending\"}}",
		 uid, uid, rv, c, gpu);
	return cJSON_Parse(js);
}

/* The uid of the pod the agent prefers for a 1-GPU container with both GPUs available. */
static const char *preferred(struct dp_pods *ps, const struct dp_inventory *inv, char *uid)
{
	const char *avail[] = { "GPU-0000", "GPU-0001" };
	struct dp_choice ch;
	char why[256];
	int n;
	struct dp_pod *pods = dp_pods_copy(ps, &n);
	assert_int_equal(dp_prefer(inv, DP_GPU, pods, n, NULL, avail, 2, NULL, 0, 1, &ch, why, sizeof(why)), 0);
	snprintf(uid, 64, "%s", pods[ch.pod].uid);
	dp_choice_release(&ch);
	free(pods);
	return uid;
}

/* Two pods bound out of creation order (y at resourceVersion 40, then x at 41) that the agent
 * first sees in one list (its watch relisted, or a refresh): kubelet's watch had y first. */
static void test_order_list_by_binding(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 0);
	char err[128], uid[64];
	struct dp_pods *ps = dp_pods_start(NULL, "n1", err, sizeof(err));
	cJSON *items = cJSON_CreateArray();
	cJSON_AddItemToArray(items, listed_pod("x", 0, 1, "41"));     /* created first, bound second */
	cJSON_AddItemToArray(items, listed_pod("y", 1, 2, "40"));
	dp_pods_apply_list(ps, items);
	assert_string_equal(preferred(ps, inv, uid), "y");
	cJSON_Delete(items);
	/* a resourceVersion that is not a number: creation time decides */
	dp_pods_stop(ps);
	ps = dp_pods_start(NULL, "n1", err, sizeof(err));
	items = cJSON_CreateArray();
	cJSON_AddItemToArray(items, listed_pod("x", 0, 1, "b"));
	cJSON_AddItemToArray(items, listed_pod("y", 1, 2, "a"));
	dp_pods_apply_list(ps, items);
	assert_string_equal(preferred(ps, inv, uid), "x");
	cJSON_Delete(items);
	dp_pods_stop(ps);
	free(inv);
	rm_tree(root);
}

/* kubelet restarts while the agent's watch has not shown two pods bound out of creation order:
 * the list the agent reads then puts them in kubelet's batch, admitted by creation; pods
 * that come after that list are ordered by their binding again. */
static void test_order_restart_batch_joined(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 0);
	char err[128], uid[64];
	struct dp_pods *ps = dp_pods_start(NULL, "n1", err, sizeof(err));
	dp_pods_kubelet_restarted(ps);
	assert_true(dp_pods_restart_unread(ps));
	cJSON *items = cJSON_CreateArray();
	cJSON_AddItemToArray(items, listed_pod("x", 0, 1, "41"));
	cJSON_AddItemToArray(items, listed_pod("y", 1, 2, "40"));
	dp_pods_apply_list(ps, items);
	cJSON_Delete(items);
	assert_false(dp_pods_restart_unread(ps));
	assert_string_equal(preferred(ps, inv, uid), "x");          /* kubelet's batch: creation order */
	dp_pods_mark_done(ps, "x", 0, DP_GPU);
	dp_pods_mark_done(ps, "y", 0, DP_GPU);
	items = cJSON_CreateArray();                                  /* later: a list brings two more */
	cJSON_AddItemToArray(items, listed_pod("v", 0, 3, "51"));
	cJSON_AddItemToArray(items, listed_pod("w", 1, 4, "50"));
	dp_pods_apply_list(ps, items);
	cJSON_Delete(items);
	assert_string_equal(preferred(ps, inv, uid), "w");
	dp_pods_stop(ps);
	free(inv);
	rm_tree(root);
}

/* ---- what kubelet did, checked against the bindings ---- */

static void record_add1(struct dp_record *rec, const char *pod, const char *ctr, const char *res, const char *a,
			const char *b)
{
	const char *ids[] = { a, b };
	assert_int_equal(dp_record_add(rec, "ml", pod, ctr, res, ids, b ? 2 : 1), 0);
}

/* Two pods bound out of creation order and swapped by a wrong guess: kubelet's record gives
 * pod-x the GPUs bound to pod-y; PreStart refuses to start pod-x's container, naming both. */
static void test_prestart_swap_refused(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(4, 0);
	int ix[] = { 0, 1 }, iy[] = { 2, 3 };
	struct dp_pod pods[2] = { pod_of("x", 1, ix, 2, DP_GPU, 2), pod_of("y", 2, iy, 2, DP_GPU, 2) };
	struct dp_record rec;
	dp_record_init(&rec);
	record_add1(&rec, "pod-x", "main", "gpu.scheduling/gpu", "GPU-0002", "GPU-0003");
	record_add1(&rec, "pod-z", "main", "cpu", "0", NULL);              /* not ours: skipped */
	assert_int_equal(rec.n, 1);
	const char *ids[] = { "GPU-0003", "GPU-0002" };
	int holder, owner;
	char msg[512];
	assert_int_equal(dp_prestart_check(inv, DP_GPU, ids, 2, &rec, pods, 2, "", &holder, &owner, msg, sizeof(msg)),
			 DP_REFUSED);
	assert_int_equal(holder, 0);
	assert_int_equal(owner, 1);
	assert_non_null(strstr(msg, "ml/pod-x"));
	assert_non_null(strstr(msg, "ml/pod-y"));
	/* the right devices start */
	rec.n = 0;
	record_add1(&rec, "pod-y", "main", "gpu.scheduling/gpu", "GPU-0002", "GPU-0003");
	assert_int_equal(dp_prestart_check(inv, DP_GPU, ids, 2, &rec, pods, 2, "", &holder, &owner, msg, sizeof(msg)),
			 DP_VERIFIED);
	assert_int_equal(holder, 1);
	/* a pod the extender did not bind (spec.nodeName) never starts with a bound pod's GPU */
	rec.n = 0;
	record_add1(&rec, "stray", "main", "gpu.scheduling/gpu", "GPU-0002", NULL);
	assert_int_equal(dp_prestart_check(inv, DP_GPU, ids + 1, 1, &rec, pods, 2, "", &holder, &owner, msg, sizeof(msg)),
			 DP_REFUSED);
	assert_non_null(strstr(msg, "ml/stray"));
	/* not in kubelet's record (an ordinary init container's): nothing to compare */
	rec.n = 0;
	assert_int_equal(dp_prestart_check(inv, DP_GPU, ids, 2, &rec, pods, 2, "", &holder, &owner, msg, sizeof(msg)),
			 DP_UNVERIFIED);
	dp_record_release(&rec);
	free(inv);
	rm_tree(root);
}

static void test_prestart_shares_and_tickets(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 0);
	int i0[] = { 0 }, i1[] = { 1 }, both[] = { 0, 1 };
	struct dp_pod pods[3] = { pod_of("s", 1, i0, 1, DP_SHARE, 1), pod_of("t", 2, i1, 1, DP_SHARE, 1),
				  pod_of("c", 3, both, 2, DP_CLAIM, 1) };
	pods[0].shared = pods[1].shared = true;
	pods[0].mem_mib = 1024;
	pods[1].mem_mib = 1024;
	struct dp_record rec;
	dp_record_init(&rec);
	record_add1(&rec, "pod-s", "main", "gpu.scheduling/gpu-share", "GPU-0001::4", NULL);
	const char *slot[] = { "GPU-0001::4" };
	int holder, owner;
	char msg[512];
	/* a slot on another pod's GPU */
	assert_int_equal(dp_prestart_check(inv, DP_SHARE, slot, 1, &rec, pods, 3, "t", &holder, &owner, msg, sizeof(msg)),
			 DP_REFUSED);
	assert_non_null(strstr(msg, "ml/pod-t"));
	/* a slot on its own GPU, delivered for another share of the same size: the same answer */
	const char *own[] = { "GPU-0000::4" };
	rec.n = 0;
	record_add1(&rec, "pod-s", "main", "gpu.scheduling/gpu-share", "GPU-0000::4", NULL);
	assert_int_equal(dp_prestart_check(inv, DP_SHARE, own, 1, &rec, pods, 3, "t", &holder, &owner, msg, sizeof(msg)),
			 DP_VERIFIED);
	pods[1].mem_mib = 2048;            /* ... of another size: its limits would be wrong */
	assert_int_equal(dp_prestart_check(inv, DP_SHARE, own, 1, &rec, pods, 3, "t", &holder, &owner, msg, sizeof(msg)),
			 DP_REFUSED);
	/* a claim ticket: the pod must be the claim pod Allocate delivered for */
	const char *ticket[] = { "claim-3" };
	rec.n = 0;
	record_add1(&rec, "pod-c", "main", "gpu.scheduling/claim", "claim-3", NULL);
	assert_int_equal(dp_prestart_check(inv, DP_CLAIM, ticket, 1, &rec, pods, 3, "c", &holder, &owner, msg, sizeof(msg)),
			 DP_VERIFIED);
	assert_int_equal(dp_prestart_check(inv, DP_CLAIM, ticket, 1, &rec, pods, 3, "s", &holder, &owner, msg, sizeof(msg)),
			 DP_REFUSED);
	assert_int_equal(dp_prestart_check(inv, DP_CLAIM, ticket, 1, &rec, pods, 3, "", &holder, &owner, msg, sizeof(msg)),
			 DP_UNVERIFIED);
	rec.n = 0;
	record_add1(&rec, "pod-s", "main", "gpu.scheduling/claim", "claim-3", NULL);   /* not a claim pod */
	assert_int_equal(dp_prestart_check(inv, DP_CLAIM, ticket, 1, &rec, pods, 3, "c", &holder, &owner, msg, sizeof(msg)),
			 DP_REFUSED);
	dp_record_release(&rec);
	free(inv);
	rm_tree(root);
}

static bool has_problem(const struct dp_problem *p, int n, enum dp_problem_kind k, const char *text)
{
	for (int i = 0; i < n; i++)
		if (p[i].kind == k && strstr(p[i].msg, text))
			return true;
	return false;
}

static void test_audit(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(4, 0);
	int ix[] = { 0, 1 }, iy[] = { 2 }, is[] = { 3 };
	struct dp_pod pods[4] = { pod_of("x", 1, ix, 2, DP_GPU, 2), pod_of("y", 2, iy, 1, DP_GPU, 1),
				  pod_of("s", 3, is, 1, DP_SHARE, 1), pod_of("t", 4, is, 1, DP_SHARE, 1) };
	pods[2].shared = pods[3].shared = true;
	struct ledger l;
	ledger_init(&l, "n1");
	const struct dp_pod *in_ledger[] = { &pods[0], &pods[2], &pods[3] };
	for (int i = 0; i < 3; i++) {
		struct ledger_entry e;
		memset(&e, 0, sizeof(e));
		snprintf(e.a.uid, sizeof(e.a.uid), "%s", in_ledger[i]->uid);
		for (int k = 0; k < in_ledger[i]->nids; k++)
			assert_int_equal(alloc_add_id(&e.a, in_ledger[i]->ids[k]), 0);
		assert_int_equal(ledger_add(&l, &e), 0);
	}
	struct dp_record rec;
	dp_record_init(&rec);
	record_add1(&rec, "pod-x", "main", "gpu.scheduling/gpu", "GPU-0000", "GPU-0001");
	record_add1(&rec, "pod-s", "main", "gpu.scheduling/gpu-share", "GPU-0003::0", NULL);
	record_add1(&rec, "pod-t", "main", "gpu.scheduling/gpu-share", "GPU-0003::1", NULL);
	struct dp_problem probs[8];
	/* all as bound, except that y's binding is missing from the ledger */
	int n = dp_audit(inv, &rec, pods, 4, &l, probs, 8);
	assert_int_equal(n, 1);
	assert_int_equal(probs[0].kind, DP_PROB_NOT_IN_LEDGER);
	assert_non_null(strstr(probs[0].msg, "ml/pod-y"));
	/* a container without a binding holding y's GPU, and a share slot on x's: held twice */
	record_add1(&rec, "stray", "main", "gpu.scheduling/gpu", "GPU-0002", NULL);
	record_add1(&rec, "pod-t", "side", "gpu.scheduling/gpu-share", "GPU-0001::0", NULL);
	n = dp_audit(inv, &rec, pods, 4, NULL, probs, 8);
	assert_true(has_problem(probs, n, DP_PROB_UNBOUND, "ml/stray"));
	assert_true(has_problem(probs, n, DP_PROB_OUTSIDE, "GPU 1 (GPU-0001)"));
	assert_true(has_problem(probs, n, DP_PROB_TWICE, "GPU 1 (GPU-0001) is held by two pods: ml/pod-x"));
	assert_false(has_problem(probs, n, DP_PROB_TWICE, "GPU-0003"));     /* two shares of one GPU are fine */
	assert_int_equal(n, 3);
	/* more problems than room: all counted */
	assert_int_equal(dp_audit(inv, &rec, pods, 4, NULL, probs, 1), 3);
	assert_string_equal(dp_problem_name(DP_PROB_OUTSIDE), "outside_binding");
	dp_record_release(&rec);
	ledger_release(&l);
	free(inv);
	rm_tree(root);
}


/* The auditor's thread and counters: PreStart verdicts counted, an unreadable kubelet
 * record counted as an audit error (the metric an alert would watch). */
/* The /metrics text holds each family of the table, with its type, and no series the table lacks. */
static void assert_families_match(const char *text)
{
	int n;
	const struct metric_family *f = dp_auditor_families(&n);
	for (int i = 0; i < n; i++) {
		char want[200];
		snprintf(want, sizeof(want), "# TYPE %s %s\n", f[i].name, f[i].type);
		assert_non_null(strstr(text, want));
	}
	for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
		size_t len = strcspn(line, "{ \n");
		bool known = line[0] == '#';
		for (int i = 0; i < n && !known; i++)
			known = strlen(f[i].name) == len && !strncmp(line, f[i].name, len);
		if (!known)
			fail_msg("served but not in the table: %.*s", (int)len, line);
		for (int i = 0; i < n && line[0] != '#' && line[len] == '{'; i++) {
			if (strlen(f[i].name) != len || strncmp(line, f[i].name, len))
				continue;
			bool listed = false;
			for (int k = 0; k < 8 && f[i].values[k] && !listed; k++) {
				char series[200];
				snprintf(series, sizeof(series), "{%s=\"%s\"} ", f[i].labels, f[i].values[k]);
				listed = !strncmp(line + len, series, strlen(series));
			}
			if (!listed)
				fail_msg("a label value the table lacks: %.*s", (int)strcspn(line, "\n"), line);
		}
	}
	/* The kinds the table lists are dp_problem_name's. */
	for (int k = 0; k < DP_NPROB; k++)
		assert_string_equal(f[0].values[k], dp_problem_name(k));
	assert_null(f[0].values[DP_NPROB]);
}

/* A port nobody listens on now (the kernel's pick, closed again). */
static int unused_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* GET /metrics over TCP, as Prometheus scrapes it: the whole answer, headers included. */
static void scrape(int port, struct buf *out)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	const char req[] = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
	assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
	char chunk[4096];
	ssize_t n;
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		buf_add(out, chunk, (size_t)n);
	close(fd);
}

static void test_auditor_metrics(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(1, 0);
	struct dp_config cfg;
	dp_config_default(&cfg);
	snprintf(cfg.node, sizeof(cfg.node), "n1");
	snprintf(cfg.podresources_socket, sizeof(cfg.podresources_socket), "/tmp/no-such-podresources.sock");
	cfg.audit_every_s = 1;
	int port = unused_port();
	snprintf(cfg.metrics_listen, sizeof(cfg.metrics_listen), "127.0.0.1:%d", port);
	char err[256];
	struct dp_pods *ps = dp_pods_start(NULL, "n1", err, sizeof(err));
	struct dp_auditor *a = dp_auditor_start(&cfg, NULL, NULL, ps, err, sizeof(err));
	assert_non_null(a);
	dp_auditor_inventory(a, inv);
	dp_auditor_prestart(a, DP_REFUSED, "ml", "pod-x", "ml", "pod-y", "container main of pod ml/pod-x ...");
	dp_auditor_prestart(a, DP_VERIFIED, "ml", "pod-y", "", "", "");
	struct buf m;
	buf_init(&m, 1 << 16);
	bool counted = false;
	for (int i = 0; i < 60 && !counted; i++) {
		usleep(50000);
		buf_clear(&m);
		dp_auditor_metrics(a, &m);
		counted = strstr(buf_cstr(&m), "gpu_agent_audit_errors_total{source=\"podresources\"} 0") == NULL;
	}
	assert_true(counted);
	assert_non_null(strstr(buf_cstr(&m), "gpu_agent_prestart_checks_total{result=\"refused\"} 1"));
	assert_non_null(strstr(buf_cstr(&m), "gpu_agent_prestart_checks_total{result=\"verified\"} 1"));
	assert_non_null(strstr(buf_cstr(&m), "gpu_agent_allocation_problems{kind=\"held_twice\"} 0"));
	assert_non_null(strstr(buf_cstr(&m), "# TYPE gpu_agent_allocation_problems_found_total counter"));
	/* What the served /metrics holds: the families of the table and nothing else. */
	buf_clear(&m);
	scrape(port, &m);
	const char *body = strstr(buf_cstr(&m), "\r\n\r\n");
	assert_non_null(body);
	assert_non_null(strstr(buf_cstr(&m), " 200 "));
	assert_families_match(body + 4);
	buf_release(&m);
	dp_auditor_stop(a);
	dp_pods_stop(ps);
	free(inv);
	rm_tree(root);
}

/* ---- responses ---- */

static const char *env_of(const struct dp_response *r, const char *name)
{
	for (int i = 0; i < r->nenv; i++)
		if (!strcmp(r->env[i].name, name))
			return r->env[i].value;
	return NULL;
}

static void test_response_modes(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 1);
	struct dp_config cfg;
	dp_config_default(&cfg);
	struct dp_response *r = malloc(sizeof(*r));
	char err[256];
	int nv[] = { 0, 1 }, amd[] = { 2 };
	/* device files: the GPUs' own and their vendor's common ones */
	assert_int_equal(dp_response_build(inv, &cfg, nv, 2, NULL, r, err, sizeof(err)), 0);
	assert_int_equal(r->nspec, 4);       /* nvidia4, nvidia5, nvidiactl, nvidia-uvm */
	assert_string_equal(r->spec[0].path, "/dev/nvidia4");
	assert_string_equal(env_of(r, "CUDA_VISIBLE_DEVICES"), "GPU-0000,GPU-0001");
	assert_string_equal(env_of(r, "NVIDIA_VISIBLE_DEVICES"), "GPU-0000,GPU-0001");
	assert_int_equal(r->nmount, 0);
	assert_int_equal(r->ncdi, 0);
	/* AMD: render and card files plus kfd, no NVIDIA files or variables */
	assert_int_equal(dp_response_build(inv, &cfg, amd, 1, NULL, r, err, sizeof(err)), 0);
	assert_int_equal(r->nspec, 3);
	assert_string_equal(r->spec[2].path, "/dev/kfd");
	assert_null(env_of(r, "CUDA_VISIBLE_DEVICES"));
	/* volume mounts: one per GPU, the runtime reads the directory */
	cfg.delivery = DP_DELIVERY_VOLUME_MOUNTS;
	assert_int_equal(dp_response_build(inv, &cfg, nv, 2, NULL, r, err, sizeof(err)), 0);
	assert_int_equal(r->nmount, 2);
	assert_string_equal(r->mount[1].container_path, "/var/run/nvidia-container-devices/GPU-0001");
	assert_string_equal(r->mount[1].host_path, "/dev/null");
	assert_true(r->mount[1].read_only);
	assert_string_equal(env_of(r, "NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
	/* CDI: names only */
	cfg.delivery = DP_DELIVERY_CDI;
	assert_int_equal(dp_response_build(inv, &cfg, nv, 2, NULL, r, err, sizeof(err)), 0);
	assert_int_equal(r->nspec, 0);
	assert_int_equal(r->ncdi, 2);
	assert_string_equal(r->cdi[0], "gpu.scheduling/gpu=GPU-0000");
	assert_string_equal(env_of(r, "NVIDIA_VISIBLE_DEVICES"), "void");
	/* a share: the MPS limits and the share for everyone to read */
	cfg.delivery = DP_DELIVERY_DEVICES;
	snprintf(cfg.mps_pipe_dir, sizeof(cfg.mps_pipe_dir), "/run/nvidia-mps");
	int ids[] = { 1 };
	struct dp_pod share = pod_of("s", 1, ids, 1, DP_SHARE, 1);
	share.shared = true;
	share.mem_mib = 8192;
	share.core_pct = 30;
	assert_int_equal(dp_response_build(inv, &cfg, ids, 1, &share, r, err, sizeof(err)), 0);
	assert_string_equal(env_of(r, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "30");
	assert_string_equal(env_of(r, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M");
	assert_string_equal(env_of(r, "GPU_SCHEDULING_SHARED_MEMORY_MIB"), "8192");
	assert_string_equal(env_of(r, "CUDA_MPS_PIPE_DIRECTORY"), "/run/nvidia-mps");
	assert_int_equal(r->nmount, 1);
	/* a device without files cannot be delivered */
	inv->dev[1].nnode = 0;
	assert_int_equal(dp_response_build(inv, &cfg, ids, 1, NULL, r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "no device files"));
	free(r);
	free(inv);
	rm_tree(root);
}

static void test_cdi_spec(void **state)
{
	(void)state;
	struct dp_inventory *inv = inventory_of(2, 0);
	char *json = dp_cdi_spec(inv);
	assert_non_null(json);
	cJSON *spec = cJSON_Parse(json);
	assert_string_equal(cJSON_GetObjectItem(spec, "kind")->valuestring, "gpu.scheduling/gpu");
	cJSON *devs = cJSON_GetObjectItem(spec, "devices");
	assert_int_equal(cJSON_GetArraySize(devs), 2);
	cJSON *d1 = cJSON_GetArrayItem(devs, 1);
	assert_string_equal(cJSON_GetObjectItem(d1, "name")->valuestring, "GPU-0001");
	cJSON *node = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(d1, "containerEdits"), "deviceNodes"), 0);
	assert_string_equal(cJSON_GetObjectItem(node, "path")->valuestring, "/dev/nvidia5");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(spec, "containerEdits"),
								"deviceNodes")), 2);
	char dir[300], err[256], path[400];
	snprintf(dir, sizeof(dir), "%s/cdi", root);
	assert_int_equal(dp_cdi_write(dir, json, err, sizeof(err)), 0);
	snprintf(path, sizeof(path), "%s/gpu.scheduling-gpu.json", dir);
	struct buf b;
	buf_init(&b, 1 << 20);
	assert_int_equal(buf_read_file(&b, path, err, sizeof(err)), 0);
	assert_string_equal(buf_cstr(&b), json);
	buf_release(&b);
	assert_int_equal(dp_cdi_write("/proc/no-such-dir/x", json, err, sizeof(err)), -1);
	cJSON_Delete(spec);
	free(json);
	free(inv);
	rm_tree(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frame_roundtrip),
		cmocka_unit_test(test_percent_encoding),
		cmocka_unit_test(test_h2c_roundtrip),
		cmocka_unit_test(test_inventory_device_files),
		cmocka_unit_test(test_inventory_host_root),
		cmocka_unit_test(test_inventory_kubelet_ids),
		cmocka_unit_test(test_resource_lists),
		cmocka_unit_test(test_pod_parse),
		cmocka_unit_test(test_pod_allocation_version),
		cmocka_unit_test(test_pods_store),
		cmocka_unit_test(test_prefer_whole),
		cmocka_unit_test(test_prefer_shares_and_tickets),
		cmocka_unit_test(test_match),
		cmocka_unit_test(test_prefer_skips_deleting),
		cmocka_unit_test(test_prefer_sidecar_share),
		cmocka_unit_test(test_order_after_kubelet_restart),
		cmocka_unit_test(test_order_list_by_binding),
		cmocka_unit_test(test_order_restart_batch_joined),
		cmocka_unit_test(test_prestart_swap_refused),
		cmocka_unit_test(test_prestart_shares_and_tickets),
		cmocka_unit_test(test_audit),
		cmocka_unit_test(test_auditor_metrics),
		cmocka_unit_test(test_response_modes),
		cmocka_unit_test(test_cdi_spec),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
