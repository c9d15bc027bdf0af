/*
 * Matching kubelet's requests to the pods the extender bound here, and
 * what each container gets. Pure: inventory, pods and request in, choice
 * or response out.
 *
 * kubelet's device-plugin calls name no pod. It admits one pod at a time,
 * container by container (init containers first), and for each resource
 * of a container asks GetPreferredAllocation (which devices?), then
 * Allocate (how are these given?). The pod is found from what kubelet
 * does say: the resource and the count asked, the devices still
 * available, and in Allocate the very devices chosen, which for whole
 * GPUs belong to exactly one bound pod.
 */
#include "devplugin.h"
#include "vendor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_choice_release(struct dp_choice *c)
{
	free(c->id);
	c->id = NULL;
	c->nid = 0;
}

static bool in_list(const char *const *list, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i], s))
			return true;
	return false;
}

/* pods[] indexes: current first, then kubelet's order. Caller frees. */
static int *ranked(const struct dp_pod *pods, int npods, const char *current)
{
	int *idx = npods ? malloc((size_t)npods * sizeof(*idx)) : NULL;
	if (!idx)
		return NULL;
	for (int i = 0; i < npods; i++)
		idx[i] = i;
	for (int i = 1; i < npods; i++) {       /* insertion sort: a node has few pods */
		int x = idx[i], j = i;
		bool xcur = current && !strcmp(pods[x].uid, current);
		while (j > 0) {
			int y = idx[j - 1];
			bool ycur = current && !strcmp(pods[y].uid, current);
			if (ycur || (!xcur && dp_pod_order(&pods[y], &pods[x]) <= 0))
				break;
			idx[j] = y;
			j--;
		}
		idx[j] = x;
	}
	return idx;
}

/* The first container of p that still waits for size of r; -1 if none. */
static int waiting_container(const struct dp_pod *p, enum dp_resource r, int size)
{
	for (int k = 0; k < p->ncontainers; k++)
		if (p->c[k].want[r] == size && !p->c[k].done[r])
			return k;
	return -1;
}

/*
 * The pod's bound devices as inventory indexes, in the binding's order.
 * -1 with err when one is gone or is another device than the binding named.
 */
static int bound_devices(const struct dp_inventory *inv, const struct dp_pod *p, int *devs, char *err,
			 size_t errlen)
{
	for (int k = 0; k < p->nids; k++) {
		int i = dp_inventory_find(inv, p->ids[k]);
		if (i < 0) {
			snprintf(err, errlen, "pod %s/%s is bound to GPU %d, which this node does not have", p->ns,
				 p->name, p->ids[k]);
			return -1;
		}
		if (p->uuids[k][0] && inv->dev[i].uuid[0] && strcmp(p->uuids[k], inv->dev[i].uuid)) {
			snprintf(err, errlen, "pod %s/%s was bound to GPU %d as %s, but GPU %d is %s now", p->ns,
				 p->name, p->ids[k], p->uuids[k], p->ids[k], inv->dev[i].uuid);
			return -1;
		}
		devs[k] = i;
	}
	return 0;
}

static int choice_ids(struct dp_choice *c, int n)
{
	c->id = calloc((size_t)(n ? n : 1), sizeof(*c->id));
	c->nid = 0;
	return c->id ? 0 : -1;
}

/* The lowest share slot of device d in available that is not taken yet; NULL if none. */
static const char *free_slot(const struct dp_device *d, const char *const *available, size_t navail,
			     const struct dp_choice *taken)
{
	size_t klen = strlen(d->kubelet_id);
	const char *best = NULL;
	long best_k = -1;
	for (size_t i = 0; i < navail; i++) {
		const char *s = available[i];
		if (strncmp(s, d->kubelet_id, klen) || strncmp(s + klen, "::", 2))
			continue;
		long k = strtol(s + klen + 2, NULL, 10);
		bool dup = false;
		for (int t = 0; t < taken->nid && !dup; t++)
			dup = !strcmp(taken->id[t], s);
		if (!dup && (best_k < 0 || k < best_k)) {
			best = s;
			best_k = k;
		}
	}
	return best;
}

/* Fills out->id for pod p's container ck; false when the pod cannot be it. */
static bool prefer_for(const struct dp_inventory *inv, enum dp_resource r, const struct dp_pod *p, int ck,
		       const char *const *available, size_t navail, const char *const *must, size_t nmust,
		       int size, struct dp_choice *out)
{
	int devs[GPU_MAX_DEVICES];
	char err[256];
	if (r != DP_CLAIM && bound_devices(inv, p, devs, err, sizeof(err)))
		return false;
	if (choice_ids(out, size))
		return false;
	for (size_t m = 0; m < nmust && out->nid < size; m++)
		snprintf(out->id[out->nid++], DP_ID_MAX, "%s", must[m]);
	if (r == DP_GPU) {
		for (size_t m = 0; m < nmust; m++) {
			bool mine = false;
			for (int k = 0; k < p->nids && !mine; k++)
				mine = !strcmp(inv->dev[devs[k]].kubelet_id, must[m]);
			if (!mine)
				return false;     /* kubelet already gave this container a device not bound to p */
		}
		for (int k = 0; k < p->nids && out->nid < size; k++) {
			const char *kid = inv->dev[devs[k]].kubelet_id;
			if (in_list(available, navail, kid) && !in_list(must, nmust, kid))
				snprintf(out->id[out->nid++], DP_ID_MAX, "%s", kid);
		}
	} else if (r == DP_SHARE) {
		/* one slot on each bound GPU, starting after the GPUs that containers
		   running beside this one took: earlier app containers and sidecars
		   (an ordinary init container's end before the next starts) */
		int start = 0;
		for (int k = 0; k < ck; k++)
			if (p->c[k].restartable || (!p->c[k].init && !p->c[ck].init))
				start += p->c[k].want[DP_SHARE];
		for (int step = 0; step < p->nids && out->nid < size; step++) {
			const struct dp_device *d = &inv->dev[devs[(start + step) % p->nids]];
			const char *slot = free_slot(d, available, navail, out);
			if (slot)
				snprintf(out->id[out->nid++], DP_ID_MAX, "%s", slot);
		}
	} else {
		for (size_t i = 0; i < navail && out->nid < size; i++)
			if (!strncmp(available[i], "claim-", 6) && !in_list(must, nmust, available[i]))
				snprintf(out->id[out->nid++], DP_ID_MAX, "%s", available[i]);
	}
	return out->nid == size;
}

static bool pod_takes(const struct dp_pod *p, enum dp_resource r)
{
	if (p->admitted || p->finished || p->deleting || !p->nids)
		return false;
	/* a share never takes a whole GPU: kubelet would hand it out exclusively */
	return r != DP_GPU || !p->shared;
}

int dp_prefer(const struct dp_inventory *inv, enum dp_resource r, const struct dp_pod *pods, int npods,
	      const char *current, const char *const *available, size_t navail, const char *const *must,
	      size_t nmust, int size, struct dp_choice *out, char *why, size_t whylen)
{
	memset(out, 0, sizeof(*out));
	out->pod = out->container = -1;
	if (size <= 0) {
		snprintf(why, whylen, "allocation size %d", size);
		return -1;
	}
	int *order = ranked(pods, npods, current);
	int waiting = 0;
	for (int o = 0; o < npods && order; o++) {
		const struct dp_pod *p = &pods[order[o]];
		int ck = pod_takes(p, r) ? waiting_container(p, r, size) : -1;
		if (ck < 0)
			continue;
		waiting++;
		if (prefer_for(inv, r, p, ck, available, navail, must, nmust, size, out)) {
			out->pod = order[o];
			out->container = ck;
			free(order);
			return 0;
		}
		dp_choice_release(out);
	}
	free(order);
	if (waiting)
		snprintf(why, whylen, "%d pod(s) here wait for %d %s, but none has its bound devices available",
			 waiting, size, dp_resource_name(r));
	else
		snprintf(why, whylen, "no pod bound to this node by the extender waits for %d %s", size,
			 dp_resource_name(r));
	return -1;
}

/* Whether every id kubelet chose is one of p's bound GPUs (or a slot on one); fills out->dev. */
static bool holds(const struct dp_inventory *inv, enum dp_resource r, const struct dp_pod *p,
		  const char *const *ids, size_t nids, struct dp_choice *out)
{
	int devs[GPU_MAX_DEVICES];
	char err[256];
	if (bound_devices(inv, p, devs, err, sizeof(err)))
		return false;
	if (r == DP_CLAIM) {
		for (size_t i = 0; i < nids; i++)
			if (strncmp(ids[i], "claim-", 6))
				return false;
		out->ndev = p->nids;              /* the container holding the ticket gets the claim's devices */
		memcpy(out->dev, devs, (size_t)p->nids * sizeof(int));
		return true;
	}
	out->ndev = 0;
	for (size_t i = 0; i < nids; i++) {
		char kid[DP_ID_MAX];
		if (r == DP_SHARE ? !dp_slot_device(ids[i], kid, sizeof(kid))
				  : snprintf(kid, sizeof(kid), "%s", ids[i]) >= (int)sizeof(kid))
			return false;
		int found = -1;
		for (int k = 0; k < p->nids && found < 0; k++)
			if (!strcmp(inv->dev[devs[k]].kubelet_id, kid))
				found = devs[k];
		if (found < 0)
			return false;
		bool dup = false;
		for (int k = 0; k < out->ndev && !dup; k++)
			dup = out->dev[k] == found;
		if (!dup)
			out->dev[out->ndev++] = found;
	}
	return out->ndev > 0;
}

int dp_match(const struct dp_inventory *inv, enum dp_resource r, const struct dp_pod *pods, int npods,
	     const char *current, const char *const *ids, size_t nids, struct dp_choice *out, char *err,
	     size_t errlen)
{
	memset(out, 0, sizeof(*out));
	out->pod = out->container = -1;
	int *order = ranked(pods, npods, current);
	for (int o = 0; o < npods && order; o++) {
		const struct dp_pod *p = &pods[order[o]];
		if (!pod_takes(p, r) || (r == DP_SHARE && !p->shared))
			continue;
		int ck = waiting_container(p, r, (int)nids);
		if (ck >= 0 && holds(inv, r, p, ids, nids, out)) {
			out->pod = order[o];
			out->container = ck;
			free(order);
			return 0;
		}
	}
	free(order);
	char list[256] = "";
	for (size_t i = 0; i < nids && strlen(list) < sizeof(list) - 80; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "," : "", ids[i]);
	snprintf(err, errlen,
		 "no pod the extender bound to this node holds %s %s; a pod asking %s must be "
		 "scheduled by the gpu-scheduler (schedulerName), which binds its devices",
		 dp_resource_name(r), list, dp_resource_name(r));
	return -1;
}

/* ---- the response ---------------------------------------------------------------- */

static int add_env(struct dp_response *o, const char *name, const char *value)
{
	if (o->nenv >= DP_MAX_ENV)
		return -1;
	snprintf(o->env[o->nenv].name, sizeof(o->env[0].name), "%s", name);
	snprintf(o->env[o->nenv].value, sizeof(o->env[0].value), "%s", value);
	o->nenv++;
	return 0;
}

static int add_spec(struct dp_response *o, const struct dp_devnode *n)
{
	for (int i = 0; i < o->nspec; i++)
		if (!strcmp(o->spec[i].host_path, n->host_path))
			return 0;          /* MIG instances of one GPU share its file */
	if (o->nspec >= DP_MAX_SPECS)
		return -1;
	o->spec[o->nspec++] = *n;
	return 0;
}

/* Appends s to a comma-separated list in a fixed buffer. */
static void list_add(char *list, size_t size, const char *s)
{
	size_t len = strlen(list);
	snprintf(list + len, size - len, "%s%s", len ? "," : "", s);
}

/* Vendor v's list variables and its runtime's variable (its device list, or nothing with CDI). */
static int vendor_env(struct dp_response *out, const struct dp_config *cfg, const struct vendor *v, const char *ids)
{
	int rc = 0;
	for (const char *const *e = v->plugin_env; *e; e++)
		rc |= add_env(out, *e, ids);
	if (v->runtime_env[0])
		rc |= add_env(out, v->runtime_env,
			      cfg->delivery == DP_DELIVERY_VOLUME_MOUNTS && v->runtime_dir[0] ? v->runtime_dir
			      : cfg->delivery == DP_DELIVERY_CDI ? v->runtime_off : ids);
	return rc;
}

/* The share isolation of vendor v's n devices (its control daemon's variables and pipe directory). */
static int share_env(struct dp_response *out, const struct dp_config *cfg, const struct vendor *v, int n,
		     const struct dp_pod *share)
{
	int rc = 0;
	char val[1024];
	if (v->share.core_env && share->core_pct) {
		snprintf(val, sizeof(val), "%u", share->core_pct);
		rc |= add_env(out, v->share.core_env, val);
	}
	if (v->share.mem_env && share->mem_mib) {
		val[0] = '\0';
		for (int k = 0; k < n; k++) {
			char one[32];
			snprintf(one, sizeof(one), "%d=%uM", k, share->mem_mib);
			list_add(val, sizeof(val), one);
		}
		rc |= add_env(out, v->share.mem_env, val);
	}
	if (v->share.pipe_env && cfg->mps_pipe_dir[0]) {
		struct dp_mount *m = &out->mount[out->nmount++];
		snprintf(m->container_path, sizeof(m->container_path), "%s", cfg->mps_pipe_dir);
		snprintf(m->host_path, sizeof(m->host_path), "%s", cfg->mps_pipe_dir);
		rc |= add_env(out, v->share.pipe_env, cfg->mps_pipe_dir);
	}
	return rc;
}

int dp_response_build(const struct dp_inventory *inv, const struct dp_config *cfg, const int *devs, int ndev,
		      const struct dp_pod *share, struct dp_response *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	char ids[VENDOR_COUNT][1024];       /* ids[v - 1]: vendor v's devices, as its runtime names them */
	int count[VENDOR_COUNT] = { 0 };
	bool any_vendor[VENDOR_COUNT + 1] = { false };
	for (int v = 0; v < VENDOR_COUNT; v++)
		ids[v][0] = '\0';
	for (int k = 0; k < ndev; k++) {
		const struct dp_device *d = &inv->dev[devs[k]];
		if (!d->nnode) {
			snprintf(err, errlen, "GPU %d (%s) has no device files: %s", d->id, d->kubelet_id, d->why);
			return -1;
		}
		const struct vendor *v = vendor_get(d->vendor);
		if ((unsigned)d->vendor <= VENDOR_COUNT)
			any_vendor[d->vendor] = true;
		if (v) {
			count[v->id - 1]++;
			list_add(ids[v->id - 1], sizeof(ids[0]), d->uuid[0] ? d->uuid : d->kubelet_id);
		}
		if (cfg->delivery == DP_DELIVERY_CDI) {
			snprintf(out->cdi[out->ncdi++], sizeof(out->cdi[0]), "%s=%s", v ? v->cdi_kind : DP_CDI_KIND,
				 d->kubelet_id);
			continue;
		}
		for (int n = 0; n < d->nnode; n++)
			if (add_spec(out, &d->node[n])) {
				snprintf(err, errlen, "too many device files");
				return -1;
			}
		if (cfg->delivery == DP_DELIVERY_VOLUME_MOUNTS && v && v->runtime_dir[0]) {
			/* the runtime hands over the devices the mounts under its list are named after */
			struct dp_mount *m = &out->mount[out->nmount++];
			snprintf(m->container_path, sizeof(m->container_path), "%s/%s", v->runtime_dir,
				 d->uuid[0] ? d->uuid : d->kubelet_id);
			snprintf(m->host_path, sizeof(m->host_path), "/dev/null");
			m->read_only = true;
		}
	}
	if (cfg->delivery != DP_DELIVERY_CDI)
		for (int i = 0; i < inv->ncommon; i++)
			if ((unsigned)inv->common_vendor[i] <= VENDOR_COUNT && any_vendor[inv->common_vendor[i]] &&
			    add_spec(out, &inv->common[i])) {
				snprintf(err, errlen, "too many device files");
				return -1;
			}
	int rc = 0;
	for (int v = 0; v < VENDOR_COUNT; v++)
		if (count[v])
			rc |= vendor_env(out, cfg, vendor_get((enum gpu_vendor)(v + 1)), ids[v]);
	if (share && share->shared) {
		char val[32];
		snprintf(val, sizeof(val), "%u", share->mem_mib);
		rc |= add_env(out, "GPU_SCHEDULING_SHARED_MEMORY_MIB", val);
		snprintf(val, sizeof(val), "%u", share->core_pct);
		rc |= add_env(out, "GPU_SCHEDULING_SHARED_CORE_PERCENT", val);
		for (int v = 0; v < VENDOR_COUNT; v++)
			if (count[v])
				rc |= share_env(out, cfg, vendor_get((enum gpu_vendor)(v + 1)), count[v], share);
	}
	if (rc) {
		snprintf(err, errlen, "too many environment variables");
		return -1;
	}
	return 0;
}
