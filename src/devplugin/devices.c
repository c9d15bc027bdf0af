/*
 * The devices as the plugin serves them: the agent's devices plus their
 * device files (under the host's / in production, a fake device root in
 * tests), and the lists ListAndWatch sends per resource.
 */
#include "devplugin.h"
#include "vendor.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
	const char *name, *socket;
} resources[DP_NRES] = {
	[DP_GPU] = { "gpu.scheduling/gpu", "gpu-scheduling-gpu.sock" },
	[DP_SHARE] = { "gpu.scheduling/gpu-share", "gpu-scheduling-gpu-share.sock" },
	[DP_CLAIM] = { "gpu.scheduling/claim", "gpu-scheduling-claim.sock" },
};

const char *dp_resource_name(enum dp_resource r)
{
	return r < DP_NRES ? resources[r].name : "";
}

const char *dp_resource_socket(enum dp_resource r)
{
	return r < DP_NRES ? resources[r].socket : "";
}

static const char *const delivery_names[] = {
	[DP_DELIVERY_DEVICES] = "devices",
	[DP_DELIVERY_VOLUME_MOUNTS] = "volume-mounts",
	[DP_DELIVERY_CDI] = "cdi",
};

bool dp_delivery_parse(const char *s, enum dp_delivery *out)
{
	for (size_t i = 0; i < sizeof(delivery_names) / sizeof(delivery_names[0]); i++)
		if (s && !strcmp(s, delivery_names[i])) {
			*out = (enum dp_delivery)i;
			return true;
		}
	return false;
}

const char *dp_delivery_name(enum dp_delivery d)
{
	return d <= DP_DELIVERY_CDI ? delivery_names[d] : "";
}

void dp_config_default(struct dp_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->plugin_dir, sizeof(c->plugin_dir), "%s", DP_PLUGIN_DIR);
	snprintf(c->podresources_socket, sizeof(c->podresources_socket), "%s", DP_PODRESOURCES_SOCKET);
	snprintf(c->cdi_dir, sizeof(c->cdi_dir), "%s", DP_CDI_DIR);
	c->delivery = DP_DELIVERY_DEVICES;
	c->share_slots = DP_DEFAULT_SHARE_SLOTS;
	c->claim_tickets = DP_DEFAULT_CLAIM_TICKETS;
	snprintf(c->ledger_ns, sizeof(c->ledger_ns), "gpu-system");
	c->audit_every_s = 30;
	c->events = true;
}

/* ---- device files --------------------------------------------------------- */

/* Where the devices are on the host, and where this process sees the host. */
struct roots {
	const char *dev;             /* prefix of host paths ("" = /) */
	const char *host;            /* prefix that reaches the host's / from here */
};

static const char *root_prefix(const char *r)
{
	return r && strcmp(r, "/") ? r : "";
}

/* A device file: true when it is there (and fills n with both paths). */
static bool devnode(struct dp_devnode *n, const struct roots *rt, const char *path)
{
	char seen[2 * DP_PATH_MAX + 64];
	struct stat st;
	snprintf(n->path, sizeof(n->path), "%s", path);
	snprintf(n->host_path, sizeof(n->host_path), "%s%s", rt->dev, path);
	snprintf(seen, sizeof(seen), "%s%s", rt->host, n->host_path);
	return !stat(seen, &st) && S_ISCHR(st.st_mode);
}

/* "00000000:3F:00.0", "0000:3f:00.0" or "3f:00.0" -> "0000:3f:00.0"; false if not a PCI address. */
static bool pci_normalise(const char *in, char *out, size_t size)
{
	unsigned dom = 0, bus, dev, fn;
	char tail;
	if (sscanf(in, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
		dom = 0;
		if (sscanf(in, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3)
			return false;
	}
	if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
		return false;
	snprintf(out, size, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	return true;
}

/* A device's minor from its driver's proc file (v->minor_dir<pci>v->minor_file, "<minor_key> 3"), or -1. */
static int driver_minor(const struct roots *rt, const struct vendor *v, const char *pci_bus)
{
	char pci[16], path[2 * DP_PATH_MAX + 128];
	if (!pci_normalise(pci_bus, pci, sizeof(pci)))
		return -1;
	snprintf(path, sizeof(path), "%s%s%s%s%s", rt->host, rt->dev, v->minor_dir, pci, v->minor_file);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[256];
	int minor = -1;
	size_t klen = strlen(v->minor_key);
	while (minor < 0 && fgets(line, sizeof(line), f)) {
		const char *p = line + strspn(line, " \t");
		unsigned m;
		if (!strncmp(p, v->minor_key, klen) && sscanf(p + klen, "%u", &m) == 1 && m < 255)
			minor = (int)m;
	}
	fclose(f);
	return minor;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The /dev/dri files of a PCI device (renderD*, card*), from the host's sysfs. */
static int dri_nodes(struct dp_device *d, const struct roots *rt, const char *pci_bus)
{
	char pci[16], dir[2 * DP_PATH_MAX + 64];
	if (!pci_normalise(pci_bus, pci, sizeof(pci)))
		return 0;
	snprintf(dir, sizeof(dir), "%s%s/sys/bus/pci/devices/%s/drm", rt->host, rt->dev, pci);
	DIR *dp = opendir(dir);
	if (!dp)
		return 0;
	char names[DP_MAX_NODES][64];
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dp)) && n < DP_MAX_NODES)
		if (!strncmp(e->d_name, "renderD", 7) || !strncmp(e->d_name, "card", 4))
			snprintf(names[n++], sizeof(names[0]), "/dev/dri/%s", e->d_name);
	closedir(dp);
	/* readdir order is the file system's: sort, so the lists compare stably */
	qsort(names, (size_t)n, sizeof(names[0]), cmp_name);
	for (int i = 0; i < n; i++)
		if (devnode(&d->node[d->nnode], rt, names[i]))
			d->nnode++;
	return d->nnode;
}

static bool kubelet_id_ok(const char *s)
{
	size_t n = strlen(s);
	/* room for a share slot's "::<k>"; the CDI name charset */
	if (n == 0 || n > DP_ID_MAX - 8 || !isalnum((unsigned char)s[0]))
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("_.:-", *s))
			return false;
	return true;
}

static void unhealthy(struct dp_device *d, const char *why)
{
	if (d->healthy)
		snprintf(d->why, sizeof(d->why), "%s", why);
	d->healthy = false;
}

static void add_common(struct dp_inventory *inv, const struct roots *rt, const char *path, enum gpu_vendor v)
{
	if (inv->ncommon < DP_MAX_COMMON && devnode(&inv->common[inv->ncommon], rt, path))
		inv->common_vendor[inv->ncommon++] = v;
}

static bool has_common(const struct dp_inventory *inv, const char *path)
{
	for (int i = 0; i < inv->ncommon; i++)
		if (!strcmp(inv->common[i].path, path))
			return true;
	return false;
}

void dp_inventory_build(struct dp_inventory *inv, const struct agent_node *node, const struct dp_config *cfg)
{
	const struct roots roots = { root_prefix(cfg->device_root), root_prefix(cfg->host_root) };
	const struct roots *root = &roots;
	memset(inv, 0, sizeof(*inv));
	bool seen[VENDOR_COUNT] = { false };
	for (int i = 0; i < node->ndev && inv->ndev < GPU_MAX_DEVICES; i++) {
		const struct agent_device *a = &node->dev[i];
		struct dp_device *d = &inv->dev[inv->ndev++];
		d->id = a->id;
		d->vendor = a->g.vendor;
		d->index = a->g.index;
		d->mig = a->g.mig_index >= 0;
		d->healthy = a->g.health == GPU_HEALTHY;
		if (!d->healthy)
			snprintf(d->why, sizeof(d->why), "%s%s%s", gpu_health_name(a->g.health),
				 a->g.health_reason[0] ? ": " : "", a->g.health_reason);
		snprintf(d->uuid, sizeof(d->uuid), "%s", a->g.uuid);
		if (kubelet_id_ok(a->g.uuid))
			snprintf(d->kubelet_id, sizeof(d->kubelet_id), "%s", a->g.uuid);
		else
			snprintf(d->kubelet_id, sizeof(d->kubelet_id), "gpu-%d", a->id);
		const struct vendor *v = vendor_get(d->vendor);
		if (v)
			seen[v->id - 1] = true;
		if (v && v->devfile == VENDOR_DEV_MINOR) {
			/* a MIG instance is reached through its GPU's file */
			int minor = driver_minor(root, v, a->g.pci_bus);
			char path[64];
			snprintf(path, sizeof(path), "%s%d", v->dev_prefix, minor >= 0 ? minor : a->g.index);
			if (devnode(&d->node[0], root, path))
				d->nnode = 1;
			else
				unhealthy(d, "its device file is missing");
		} else if (!dri_nodes(d, root, a->g.pci_bus)) {
			unhealthy(d, "no /dev/dri device file found for its PCI address");
		}
	}
	for (int k = 0; k < VENDOR_COUNT; k++) {
		const struct vendor *v = vendor_get((enum gpu_vendor)(k + 1));
		for (const char *const *f = v->common_files; seen[k] && *f; f++)
			add_common(inv, root, *f, v->id);
	}
	/* without the control files no device of that vendor can be used */
	for (int i = 0; i < inv->ndev; i++) {
		struct dp_device *d = &inv->dev[i];
		const struct vendor *v = vendor_get(d->vendor);
		if (v && v->required_file && !has_common(inv, v->required_file)) {
			char why[96];
			snprintf(why, sizeof(why), "%s is missing", v->required_file);
			unhealthy(d, why);
		}
	}
}

int dp_inventory_find(const struct dp_inventory *inv, int id)
{
	for (int i = 0; i < inv->ndev; i++)
		if (inv->dev[i].id == id)
			return i;
	return -1;
}

int dp_inventory_find_kubelet_id(const struct dp_inventory *inv, const char *kid)
{
	for (int i = 0; i < inv->ndev; i++)
		if (!strcmp(inv->dev[i].kubelet_id, kid))
			return i;
	return -1;
}

bool dp_inventory_same(const struct dp_inventory *a, const struct dp_inventory *b)
{
	if (a->ndev != b->ndev || a->ncommon != b->ncommon)
		return false;
	for (int i = 0; i < a->ndev; i++) {
		const struct dp_device *x = &a->dev[i], *y = &b->dev[i];
		if (x->id != y->id || x->healthy != y->healthy || x->mig != y->mig || x->nnode != y->nnode ||
		    strcmp(x->kubelet_id, y->kubelet_id) || strcmp(x->uuid, y->uuid))
			return false;
		for (int k = 0; k < x->nnode; k++)
			if (strcmp(x->node[k].host_path, y->node[k].host_path))
				return false;
	}
	for (int i = 0; i < a->ncommon; i++)
		if (strcmp(a->common[i].host_path, b->common[i].host_path))
			return false;
	return true;
}

/* ---- ListAndWatch lists ---------------------------------------------------- */

struct dp_kdev *dp_resource_devices(const struct dp_inventory *inv, const struct dp_config *cfg,
				    enum dp_resource r, int *n)
{
	*n = 0;
	size_t want = 0;
	bool any_healthy = false;
	for (int i = 0; i < inv->ndev; i++) {
		any_healthy |= inv->dev[i].healthy;
		if (r == DP_GPU)
			want++;
		else if (r == DP_SHARE && !inv->dev[i].mig)
			want += (size_t)cfg->share_slots;
	}
	if (r == DP_CLAIM)
		want = inv->ndev ? (size_t)cfg->claim_tickets : 0;
	struct dp_kdev *out = want ? calloc(want, sizeof(*out)) : NULL;
	if (!out)
		return NULL;
	if (r == DP_CLAIM) {
		for (size_t k = 0; k < want; k++) {
			snprintf(out[k].id, sizeof(out[k].id), "claim-%zu", k);
			out[k].healthy = any_healthy;
		}
		*n = (int)want;
		return out;
	}
	size_t k = 0;
	for (int i = 0; i < inv->ndev; i++) {
		const struct dp_device *d = &inv->dev[i];
		if (r == DP_GPU) {
			snprintf(out[k].id, sizeof(out[k].id), "%s", d->kubelet_id);
			out[k++].healthy = d->healthy;
		} else if (!d->mig) {
			for (int s = 0; s < cfg->share_slots; s++) {
				snprintf(out[k].id, sizeof(out[k].id), "%s::%d", d->kubelet_id, s);
				out[k++].healthy = d->healthy;
			}
		}
	}
	*n = (int)k;
	return out;
}

bool dp_slot_device(const char *slot_id, char *out, size_t size)
{
	const char *sep = strstr(slot_id, "::");
	if (!sep || sep == slot_id || !isdigit((unsigned char)sep[2]))
		return false;
	snprintf(out, size, "%.*s", (int)(sep - slot_id), slot_id);
	return true;
}
