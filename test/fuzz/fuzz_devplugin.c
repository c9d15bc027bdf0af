/*
 * libFuzzer target: the device plugin's gRPC requests from kubelet, as
 * the plugin handles them (src/devplugin/plugin.c) minus the socket:
 * the DATA bytes of a request through h2rpc_unframe, the message through
 * protobuf-c (AllocateRequest or PreferredAllocationRequest), then each
 * container's request through dp_match + dp_response_build or dp_prefer,
 * against a fixed inventory (4 NVIDIA GPUs, 2 AMD) and pods bound to it.
 *
 * Byte 0 picks: bit 0 the message (Allocate, GetPreferredAllocation),
 * bits 1-2 the resource, bits 3-4 the delivery, bits 5-7 the pod of the
 * last call; the rest is the request's DATA. What comes back must name
 * only real pods, containers and devices.
 */
#include "fuzz.h"

#include "deviceplugin.pb-c.h"
#include "devplugin.h"
#include "h2rpc.h"

static struct dp_inventory inv;
static struct dp_config cfg;

/* A device with its own file; kubelet's id is its UUID. */
static void device(int id, enum gpu_vendor v, int index, const char *uuid, const char *file)
{
	struct dp_device *d = &inv.dev[inv.ndev++];
	d->id = id;
	d->vendor = v;
	d->index = index;
	d->healthy = true;
	snprintf(d->uuid, sizeof(d->uuid), "%s", uuid);
	snprintf(d->kubelet_id, sizeof(d->kubelet_id), "%s", uuid);
	d->nnode = 1;
	snprintf(d->node[0].path, sizeof(d->node[0].path), "%s", file);
	snprintf(d->node[0].host_path, sizeof(d->node[0].host_path), "%s", file);
}

static void common(enum gpu_vendor v, const char *file)
{
	snprintf(inv.common[inv.ncommon].path, sizeof(inv.common[0].path), "%s", file);
	snprintf(inv.common[inv.ncommon].host_path, sizeof(inv.common[0].host_path), "%s", file);
	inv.common_vendor[inv.ncommon++] = v;
}

static void setup(void)
{
	fuzz_quiet();
	dp_config_default(&cfg);
	snprintf(cfg.mps_pipe_dir, sizeof(cfg.mps_pipe_dir), "/tmp/nvidia-mps");
	device(0, GPU_VENDOR_NVIDIA, 0, "GPU-0000", "/dev/nvidia0");
	device(1, GPU_VENDOR_NVIDIA, 1, "GPU-0001", "/dev/nvidia1");
	device(2, GPU_VENDOR_NVIDIA, 2, "GPU-0002", "/dev/nvidia2");
	device(3, GPU_VENDOR_NVIDIA, 3, "GPU-0003", "/dev/nvidia3");
	device(100, GPU_VENDOR_AMD, 0, "GPU-amd-0", "/dev/dri/renderD128");
	device(101, GPU_VENDOR_AMD, 1, "GPU-amd-1", "/dev/dri/renderD129");
	inv.dev[5].healthy = false;    /* its file went away: no device files to give */
	inv.dev[5].nnode = 0;
	common(GPU_VENDOR_NVIDIA, "/dev/nvidiactl");
	common(GPU_VENDOR_AMD, "/dev/kfd");
}

/* The pods bound here: each container of each asks for one resource. */
static int pods_of(struct dp_pod *pods)
{
	static const struct {
		const char *uid;
		int nids, ids[2];
		bool shared;
		int want[2][DP_NRES];
	} spec[] = {
		{ "a", 2, { 2, 3 }, false, { { 2, 0, 0 }, { 0, 0, 0 } } },
		{ "b", 2, { 0, 1 }, false, { { 1, 0, 0 }, { 2, 0, 0 } } },       /* an init container first */
		{ "s", 1, { 1 }, true, { { 0, 1, 0 }, { 0, 1, 0 } } },
		{ "c", 2, { 100, 101 }, false, { { 0, 0, 1 }, { 0, 0, 0 } } },   /* one's files are gone */
	};
	int n = (int)(sizeof(spec) / sizeof(spec[0]));
	for (int i = 0; i < n; i++) {
		struct dp_pod *p = &pods[i];
		memset(p, 0, sizeof(*p));
		snprintf(p->uid, sizeof(p->uid), "%s", spec[i].uid);
		snprintf(p->ns, sizeof(p->ns), "ml");
		snprintf(p->name, sizeof(p->name), "pod-%s", spec[i].uid);
		p->seen = (uint64_t)i;
		p->nids = spec[i].nids;
		for (int k = 0; k < p->nids; k++)
			p->ids[k] = spec[i].ids[k];
		p->shared = spec[i].shared;
		p->mem_mib = p->shared ? 8192 : 0;
		p->core_pct = p->shared ? 30 : 0;
		p->ncontainers = 2;
		for (int k = 0; k < 2; k++) {
			snprintf(p->c[k].name, sizeof(p->c[k].name), "c%d", k);
			p->c[k].init = i == 1 && k == 0;
			memcpy(p->c[k].want, spec[i].want[k], sizeof(p->c[k].want));
		}
	}
	return n;
}

static void check_choice(const struct dp_choice *ch, const struct dp_pod *pods, int npods)
{
	if (ch->pod < 0 || ch->pod >= npods || ch->container < 0 || ch->container >= pods[ch->pod].ncontainers ||
	    ch->ndev < 0 || ch->ndev > GPU_MAX_DEVICES)
		abort();
	for (int k = 0; k < ch->ndev; k++)
		if (ch->dev[k] < 0 || ch->dev[k] >= inv.ndev)
			abort();
}

static void allocate(enum dp_resource r, const uint8_t *msg, size_t len, struct dp_pod *pods, int npods,
		     char *current)
{
	V1beta1__AllocateRequest *in = v1beta1__allocate_request__unpack(NULL, len, msg);
	if (!in)
		return;
	for (size_t i = 0; i < in->n_container_requests; i++) {
		const V1beta1__ContainerAllocateRequest *c = in->container_requests[i];
		struct dp_choice ch;
		char err[512];
		if (!dp_match(&inv, r, pods, npods, current[0] ? current : NULL, (const char *const *)c->devices_ids,
			      c->n_devices_ids, &ch, err, sizeof(err))) {
			check_choice(&ch, pods, npods);
			struct dp_pod *p = &pods[ch.pod];
			struct dp_response *resp = malloc(sizeof(*resp));
			if (!resp)
				abort();
			if (!dp_response_build(&inv, &cfg, ch.dev, ch.ndev, p->shared ? p : NULL, resp, err, sizeof(err))) {
				p->c[ch.container].done[r] = true;    /* as dp_pods_mark_done */
				snprintf(current, 64, "%s", p->uid);
			}
			free(resp);
		}
		dp_choice_release(&ch);
	}
	v1beta1__allocate_request__free_unpacked(in, NULL);
}

static void prefer(enum dp_resource r, const uint8_t *msg, size_t len, struct dp_pod *pods, int npods,
		   char *current)
{
	V1beta1__PreferredAllocationRequest *in = v1beta1__preferred_allocation_request__unpack(NULL, len, msg);
	if (!in)
		return;
	for (size_t i = 0; i < in->n_container_requests; i++) {
		const V1beta1__ContainerPreferredAllocationRequest *c = in->container_requests[i];
		struct dp_choice ch;
		char why[256];
		if (!dp_prefer(&inv, r, pods, npods, current[0] ? current : NULL,
			       (const char *const *)c->available_deviceids, c->n_available_deviceids,
			       (const char *const *)c->must_include_deviceids, c->n_must_include_deviceids,
			       c->allocation_size, &ch, why, sizeof(why))) {
			check_choice(&ch, pods, npods);
			if (ch.nid != c->allocation_size)
				abort();    /* kubelet wants exactly that many */
			snprintf(current, 64, "%s", pods[ch.pod].uid);
		}
		dp_choice_release(&ch);
	}
	v1beta1__preferred_allocation_request__free_unpacked(in, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!inv.ndev)
		setup();
	if (size < 1)
		return 0;
	enum dp_resource r = (enum dp_resource)((data[0] >> 1 & 3) % DP_NRES);
	cfg.delivery = (enum dp_delivery)((data[0] >> 3 & 3) % 3);
	struct dp_pod pods[4];
	int npods = pods_of(pods);
	char current[64] = "";
	int cur = data[0] >> 5;
	if (cur < npods)
		snprintf(current, sizeof(current), "%s", pods[cur].uid);

	const uint8_t *msg;
	size_t len;
	char err[256];
	if (h2rpc_unframe(data + 1, size - 1, &msg, &len, err, sizeof(err)))
		return 0;
	if (msg < data + 1 || len > size - 1 || msg + len > data + size)
		abort();    /* the message lies inside the frame */
	if (data[0] & 1)
		prefer(r, msg, len, pods, npods, current);
	else
		allocate(r, msg, len, pods, npods, current);
	return 0;
}
