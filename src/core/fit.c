#include "fit.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Selector checks, in the order a rejection reason names them. */
enum sel { SEL_KIND, SEL_VENDOR, SEL_MODEL, SEL_ARCH, SEL_MEMORY, SEL_COUNT };

/* The first selector device i fails, or SEL_COUNT when it matches the claim. */
static inline enum sel dev_mismatch(const struct gpu_node *n, int i, const struct claim *c)
{
	const struct gpu_device *d = &n->dev[i];
	if ((c->mode == CLAIM_MIG) != d->mig)
		return SEL_KIND;
	if (c->vendor && d->vendor != c->vendor)
		return SEL_VENDOR;
	/* The strings only when the claim names them: they are off the hot cache lines. */
	if (c->models[0] && !gpu_model_matches(c->models, &n->info[i]))
		return SEL_MODEL;
	if (c->arch[0] && strcasecmp(c->arch, n->info[i].arch))
		return SEL_ARCH;
	if (c->min_mem_mib && d->memory_mib < c->min_mem_mib)
		return SEL_MEMORY;
	if (c->mode == CLAIM_SHARED && d->memory_mib < c->mem_mib)
		return SEL_MEMORY;
	return SEL_COUNT;
}

/* Whether d already holds as many shares as the node's device plugin has slots for it. */
static inline bool slots_full(const struct gpu_device *d, int slots)
{
	return slots > 0 && d->shared >= slots;
}

/* Could d take the claim's share now (given it matches and is usable)? slots: the node's share slots. */
static inline bool dev_free_for(const struct gpu_device *d, const struct claim *c, int slots)
{
	if (!gpu_usable(d) || d->exclusive)
		return false;
	if (c->mode == CLAIM_SHARED)
		return gpu_free_mib(d) >= c->mem_mib && gpu_free_core(d) >= c->core && !slots_full(d, slots);
	return d->shared == 0;
}

/* What d would have left after the claim's share (dev_free_for(d) holds): compute first, then memory. */
static inline long share_room(const struct gpu_device *d, const struct claim *c)
{
	return (long)(gpu_free_core(d) - c->core) * 4096 + (long)((gpu_free_mib(d) - c->mem_mib) >> 8);
}

static bool island_ok_bw(const struct gpu_node *n, int island, const struct claim *c)
{
	return island >= 0 && n->islands[island].bandwidth_gbps >= c->min_bw_gbps;
}

/* Does this claim have to land on one island? */
static bool needs_island(const struct claim *c)
{
	return c->topo == TOPO_REQUIRED && c->count > 1;
}

/* What scanning a node for one claim found. */
struct scan {
	int matching;                   /* devices passing every selector */
	int capable;                    /* ... and usable (healthy, not external) */
	int nfree;                      /* ... and with room for the claim now */
	int free_idx[GPU_MAX_DEVICES];
	int by_sel[SEL_COUNT];          /* devices dropped at each selector */
	int first_at[SEL_COUNT];        /* index of the first device dropped there */
	int island_cap[GPU_MAX_ISLANDS];   /* capable devices per island */
	int island_free[GPU_MAX_ISLANDS];  /* free devices per island */
	int min_id, max_id;             /* id range of matching devices */
};

static void scan_node(const struct gpu_node *n, const struct claim *c, struct scan *s)
{
	/* Only what this node can touch: the scan runs for every node of a request. */
	s->matching = s->capable = s->nfree = 0;
	s->max_id = 0;
	memset(s->by_sel, 0, sizeof(s->by_sel));
	memset(s->island_cap, 0, (size_t)n->nisland * sizeof(int));
	memset(s->island_free, 0, (size_t)n->nisland * sizeof(int));
	s->min_id = -1;
	/* The claim's plain selectors, read once (the stores to *s could alias c). */
	const bool want_mig = c->mode == CLAIM_MIG;
	const enum gpu_vendor vendor = c->vendor;
	const bool strings = c->models[0] || c->arch[0];
	uint32_t need_mib = c->min_mem_mib;
	if (c->mode == CLAIM_SHARED && c->mem_mib > need_mib)
		need_mib = c->mem_mib;
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		enum sel why = SEL_COUNT;
		if (d->mig != want_mig || (vendor && d->vendor != vendor) || d->memory_mib < need_mib || strings)
			why = dev_mismatch(n, i, c);   /* the slow path names the selector */
		if (why != SEL_COUNT) {
			if (!s->by_sel[why]++)
				s->first_at[why] = i;
			continue;
		}
		if (s->min_id < 0)
			s->min_id = d->id;
		s->max_id = d->id;
		s->matching++;
		if (!gpu_usable(d))
			continue;
		s->capable++;
		if (d->island >= 0)
			s->island_cap[d->island]++;
		if (!dev_free_for(d, c, n->share_slots))
			continue;
		s->free_idx[s->nfree++] = i;
		if (d->island >= 0)
			s->island_free[d->island]++;
	}
}

/* Largest per-island count among islands fast enough for the claim. */
static int best_island(const struct gpu_node *n, const struct claim *c, const int *per_island)
{
	int best = 0;
	for (int i = 0; i < n->nisland; i++)
		if (island_ok_bw(n, i, c) && per_island[i] > best)
			best = per_island[i];
	return best;
}

static bool host_fits(const struct gpu_node *n, const struct claim *c)
{
	if (c->cpu_milli && n->cpu_cap && n->cpu_cap - n->cpu_used < c->cpu_milli)
		return false;
	if (c->mem_mib_host && n->mem_cap && n->mem_cap - n->mem_used < c->mem_mib_host)
		return false;
	return true;
}

static bool labels_match(const struct gpu_node *n, const struct claim *c, int *bad)
{
	for (int i = 0; i < c->nmatch; i++) {
		const char *v = gpu_node_label(n, c->match[i].key);
		if (!v || strcmp(v, c->match[i].value)) {
			*bad = i;
			return false;
		}
	}
	return true;
}

/*
 * A share of one device that names no string (model, architecture) and no
 * node label: the common share claim, by memory and compute, perhaps a
 * vendor or a least memory. Every node of a request reads its devices for
 * it (no count answers it). share_quick() takes the device that scan_node()
 * and choose() would, in one pass with none of their bookkeeping; false
 * when no device has room (fit_node() then says why).
 */
static bool share_quick_applies(const struct claim *c)
{
	return c->mode == CLAIM_SHARED && c->count == 1 && c->placement == PLACE_DEFAULT && !c->models[0] &&
	       !c->arch[0] && !c->nmatch && !c->cpu_milli && !c->mem_mib_host;
}

static bool share_quick(const struct gpu_node *n, const struct claim *c, enum gpu_pack pack, struct fit *f)
{
	int best = -1;
	long best_key = 0;
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		if (d->mig || (c->vendor && d->vendor != c->vendor) || d->memory_mib < c->min_mem_mib ||
		    !dev_free_for(d, c, n->share_slots))
			continue;
		long key = pack == PACK_SPREAD ? -share_room(d, c) : share_room(d, c);
		if (best < 0 || key < best_key) {
			best = i;
			best_key = key;
		}
	}
	if (best < 0)
		return false;
	f->ok = true;
	f->ndev = 1;
	f->dev[0] = best;
	return true;
}

bool fit_possible(const struct gpu_node *n, const struct claim *c)
{
	int bad;
	if (!labels_match(n, c, &bad) || !host_fits(n, c))
		return false;
	if (!claim_wants_gpu(c))
		return true;
	struct fit f;
	if (share_quick_applies(c))
		return share_quick(n, c, PACK_BINPACK, &f);
	struct scan s;
	scan_node(n, c, &s);
	if (s.nfree < c->count)
		return false;
	return !needs_island(c) || best_island(n, c, s.island_free) >= c->count;
}

void fit_whole_count(const struct gpu_node *n, struct fit_whole *out)
{
	int free = 0, usable = 0, held = 0;
	bool exact = true;
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		if (!gpu_usable(d))
			continue;
		usable++;
		if (d->exclusive)
			held++;
		else if (d->used_core || d->used_mib)
			exact = false;   /* a share: its use is a fraction (policy_util_after) */
		else if (!d->mig && !d->shared)
			free++;
	}
	*out = (struct fit_whole){ (uint8_t)free, (uint8_t)usable, (uint8_t)held, exact };
}

bool fit_whole_applies(const struct claim *c)
{
	return c->mode == CLAIM_EXCLUSIVE && c->count >= 1 && !c->vendor && !c->models[0] && !c->arch[0] &&
	       !c->min_mem_mib && !c->nmatch && !c->cpu_milli && !c->mem_mib_host && !needs_island(c);
}

int fit_candidates(const struct gpu_node *n, const struct claim *c, int *idx)
{
	int k = 0;
	for (int i = 0; i < n->ndev && k < GPU_MAX_DEVICES; i++)
		if (dev_mismatch(n, i, c) == SEL_COUNT && dev_free_for(&n->dev[i], c, n->share_slots))
			idx[k++] = i;
	return k;
}

/* ---- reasons ---------------------------------------------------------- */

#define REASON(f, ...) snprintf((f)->reason, sizeof((f)->reason), __VA_ARGS__)

static const char *unit(const struct claim *c, int count)
{
	if (c->mode == CLAIM_MIG)
		return count == 1 ? "MIG instance" : "MIG instances";
	return count == 1 ? "GPU" : "GPUs";
}

/* "nvlink-0: 2, nvlink-1: 3" for the islands fast enough for the claim. */
static void island_list(const struct gpu_node *n, const struct claim *c,
			const int *per_island, char *out, size_t size)
{
	size_t len = 0;
	out[0] = '\0';
	for (int i = 0; i < n->nisland && len < size; i++) {
		if (!island_ok_bw(n, i, c))
			continue;
		int w = snprintf(out + len, size - len, "%s%s: %d", len ? ", " : "",
				 n->islands[i].name, per_island[i]);
		if (w < 0)
			break;
		len += (size_t)w;
	}
	if (!out[0])
		snprintf(out, size, "no island%s", c->min_bw_gbps > 0 ? " that fast" : "");
}

static void explain_selector(const struct gpu_node *n, const struct claim *c,
			     const struct scan *s, struct fit *f)
{
	if (!n->ndev) {
		REASON(f, "node has no GPUs");
		return;
	}
	/*
	 * Name the last selector any device reached: the devices that came
	 * closest to matching say best what is missing.
	 */
	enum sel worst = SEL_KIND;
	for (int i = SEL_KIND; i < SEL_COUNT; i++)
		if (s->by_sel[i])
			worst = (enum sel)i;
	const struct gpu_device *d = &n->dev[s->first_at[worst]];
	const struct gpu_device_info *in = &n->info[s->first_at[worst]];
	switch (worst) {
	case SEL_KIND:
		REASON(f, c->mode == CLAIM_MIG ? "no MIG instances on this node (%d whole GPUs)"
		       : "all %d devices are MIG instances; claim wants whole GPUs", n->ndev);
		break;
	case SEL_VENDOR:
		REASON(f, "no %s GPU (node has %d %s)", gpu_vendor_name(c->vendor), n->ndev,
		       gpu_vendor_name(d->vendor)[0] ? gpu_vendor_name(d->vendor) : "unknown-vendor");
		break;
	case SEL_MODEL:
		REASON(f, "no GPU of model %s (node has %d %s)", c->models, n->ndev, in->model);
		break;
	case SEL_ARCH:
		REASON(f, "no GPU of architecture %s (node has %s)", c->arch,
		       in->arch[0] ? in->arch : "unknown");
		break;
	default:
		if (c->mode == CLAIM_SHARED && c->mem_mib > c->min_mem_mib)
			REASON(f, "GPUs have %u MiB, claim shares %u MiB of each", d->memory_mib, c->mem_mib);
		else
			REASON(f, "GPUs have %u MiB, claim needs >= %u MiB each", d->memory_mib,
			       c->min_mem_mib);
		break;
	}
}

static void explain_busy(const struct gpu_node *n, const struct claim *c,
			 const struct scan *s, struct fit *f)
{
	char range[32];
	if (s->min_id == s->max_id)
		snprintf(range, sizeof(range), "gpu %d", s->min_id);
	else
		snprintf(range, sizeof(range), "gpu %d-%d", s->min_id, s->max_id);
	if (c->mode != CLAIM_SHARED) {
		REASON(f, "%s: %d free, claim needs %d", range, s->nfree, c->count);
		return;
	}
	/* Shared: show the roomiest device so the shortfall is visible. */
	int best = -1;
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		if (dev_mismatch(n, i, c) != SEL_COUNT || !gpu_usable(d) || d->exclusive)
			continue;
		if (best < 0 || gpu_free_core(d) + gpu_free_mib(d) / 64 >
		    gpu_free_core(&n->dev[best]) + gpu_free_mib(&n->dev[best]) / 64)
			best = i;
	}
	if (best < 0) {
		REASON(f, "%s: all in exclusive use, claim needs %d shared", range, c->count);
		return;
	}
	const struct gpu_device *d = &n->dev[best];
	if (slots_full(d, n->share_slots)) {
		REASON(f, "%s: %d with room, claim needs %d (gpu %d holds %d shares, the node's share slots)",
		       range, s->nfree, c->count, d->id, (int)d->shared);
		return;
	}
	REASON(f, "%s: %d with %u MiB and %u%% compute free, claim needs %d (roomiest: gpu %d, %u MiB, %u%%)",
	       range, s->nfree, c->mem_mib, (c->core + 9) / 10, c->count, d->id,
	       gpu_free_mib(d), gpu_free_core(d) / 10);
}

/* ---- device choice ---------------------------------------------------- */

struct cand {
	int idx;
	long key;      /* smaller is taken first */
};

static void sort_cands(struct cand *a, int n)
{
	for (int i = 1; i < n; i++) {
		struct cand x = a[i];
		int j = i;
		while (j > 0 && (a[j - 1].key > x.key ||
				 (a[j - 1].key == x.key && a[j - 1].idx > x.idx))) {
			a[j] = a[j - 1];
			j--;
		}
		a[j] = x;
	}
}

static int prefer_rank(const struct claim *c, int id)
{
	for (int i = 0; i < c->nprefer; i++)
		if (c->prefer_ids[i] == id)
			return i;
	return GPU_MAX_DEVICES + 1;
}

/*
 * Picks the island a multi-device claim should land on: the fast-enough
 * island with the fewest free devices that still hold the claim, so big
 * islands stay whole for big claims (spread packing takes the roomiest).
 * Returns -1 when no island holds it.
 */
static int pick_island(const struct gpu_node *n, const struct claim *c,
		       const struct scan *s, enum gpu_pack pack, bool need_bw)
{
	int best = -1;
	for (int i = 0; i < n->nisland; i++) {
		if (s->island_free[i] < c->count || (need_bw && !island_ok_bw(n, i, c)))
			continue;
		if (best < 0) {
			best = i;
			continue;
		}
		int a = s->island_free[i], b = s->island_free[best];
		bool better = pack == PACK_SPREAD && c->mode == CLAIM_SHARED ? a > b : a < b;
		if (better || (a == b && n->islands[i].bandwidth_gbps > n->islands[best].bandwidth_gbps))
			best = i;
	}
	return best;
}

/* Longest-available run of consecutive ids: start index in cands, or -1. */
static int contiguous_run(const struct gpu_node *n, const struct cand *cands, int nc, int count)
{
	for (int start = 0; start + count <= nc; start++) {
		int ok = 1;
		for (int k = 1; k < count && ok; k++)
			ok = n->dev[cands[start + k].idx].id == n->dev[cands[start].idx].id + k;
		if (ok)
			return start;
	}
	return -1;
}

static void choose(const struct gpu_node *n, const struct claim *c, const struct scan *s,
		   enum gpu_pack pack, struct fit *f)
{
	int island = -1;
	if (c->count > 1 && c->topo != TOPO_IGNORE && n->nisland) {
		island = pick_island(n, c, s, pack, true);
		if (island < 0 && c->topo == TOPO_PREFERRED)
			island = pick_island(n, c, s, pack, false);
	}
	struct cand cands[GPU_MAX_DEVICES];
	int nc = 0;
	int seen_per_island[GPU_MAX_ISLANDS] = { 0 };
	for (int k = 0; k < s->nfree; k++) {
		int i = s->free_idx[k];
		const struct gpu_device *d = &n->dev[i];
		if (island >= 0 && d->island != island)
			continue;
		long key = 0;
		switch (c->placement) {
		case PLACE_PREFER_IDS:
			key = prefer_rank(c, d->id);
			break;
		case PLACE_SPREAD:
			/* Round robin over islands: the k-th device of each island ranks k. */
			key = d->island >= 0 ? seen_per_island[d->island]++ : 0;
			break;
		default:
			break;
		}
		key *= 1L << 24;
		if (c->mode == CLAIM_SHARED) {
			/* GPU level: fullest device first (binpack) or emptiest (spread). */
			key += pack == PACK_SPREAD ? -share_room(d, c) : share_room(d, c);
		} else if (island < 0 && d->island >= 0 && c->placement == PLACE_DEFAULT) {
			/*
			 * Whole devices without an island constraint: take them from
			 * the islands with the fewest free devices, so that the big
			 * free islands stay whole; with a preferred topology, from the
			 * roomiest island, so the claim spans as few islands as it can.
			 */
			long room = s->island_free[d->island];
			key += c->topo == TOPO_PREFERRED && c->count > 1 ? -room : room;
		}
		cands[nc].idx = i;
		cands[nc].key = key;
		nc++;
	}
	int start = 0;
	if (c->placement == PLACE_CONTIGUOUS) {
		sort_cands(cands, nc); /* keys are all 0: by index, i.e. by id */
		start = contiguous_run(n, cands, nc, c->count);
		if (start < 0)
			start = 0;
	} else {
		sort_cands(cands, nc);
	}
	f->ndev = c->count;
	for (int k = 0; k < c->count; k++)
		f->dev[k] = cands[start + k].idx;
	/* Ascending device order, so "node:ids" reads naturally. */
	for (int i = 1; i < f->ndev; i++) {
		int x = f->dev[i], j = i;
		while (j > 0 && f->dev[j - 1] > x) {
			f->dev[j] = f->dev[j - 1];
			j--;
		}
		f->dev[j] = x;
	}
}

bool fit_node(const struct gpu_node *n, const struct claim *c, enum gpu_pack pack,
	      struct fit *f)
{
	f->ok = false;
	f->unresolvable = false;
	f->ndev = 0;
	f->reason[0] = '\0';
	if (share_quick_applies(c) && share_quick(n, c, pack, f))
		return true;

	int bad;
	if (!labels_match(n, c, &bad)) {
		const char *have = gpu_node_label(n, c->match[bad].key);
		f->unresolvable = true;
		if (have)
			REASON(f, "node label %s=%s, claim wants %s", c->match[bad].key, have,
			       c->match[bad].value);
		else
			REASON(f, "node has no label %s, claim wants %s=%s", c->match[bad].key,
			       c->match[bad].key, c->match[bad].value);
		return false;
	}
	if (!host_fits(n, c)) {
		REASON(f, "not enough host CPU or memory (%lld/%lld mCPU, %lld/%lld MiB free, needs %lld mCPU, %lld MiB)",
		       (long long)(n->cpu_cap - n->cpu_used), (long long)n->cpu_cap,
		       (long long)(n->mem_cap - n->mem_used), (long long)n->mem_cap,
		       (long long)c->cpu_milli, (long long)c->mem_mib_host);
		return false;
	}
	if (!claim_wants_gpu(c)) {
		f->ok = true;
		return true;
	}

	struct scan s;
	scan_node(n, c, &s);
	if (!s.matching) {
		f->unresolvable = true;
		explain_selector(n, c, &s, f);
		return false;
	}
	if (s.matching < c->count) {
		f->unresolvable = true;
		REASON(f, "node has %d matching %s, claim needs %d", s.matching, unit(c, s.matching), c->count);
		return false;
	}
	if (s.capable < c->count) {
		f->unresolvable = true;
		REASON(f, "%d of %d matching %s usable (others unhealthy or held outside the scheduler), claim needs %d",
		       s.capable, s.matching, unit(c, s.matching), c->count);
		return false;
	}
	char islands[128];
	if (needs_island(c) && best_island(n, c, s.island_cap) < c->count) {
		f->unresolvable = true;
		island_list(n, c, s.island_cap, islands, sizeof(islands));
		if (c->min_bw_gbps > 0)
			REASON(f, "no island of >= %g GB/s has %d %s (%s)", c->min_bw_gbps, c->count,
			       unit(c, c->count), islands);
		else
			REASON(f, "no island has %d %s (%s)", c->count, unit(c, c->count), islands);
		return false;
	}
	if (s.nfree < c->count) {
		explain_busy(n, c, &s, f);
		return false;
	}
	if (needs_island(c) && best_island(n, c, s.island_free) < c->count) {
		island_list(n, c, s.island_free, islands, sizeof(islands));
		REASON(f, "%d free %s but no island has %d (%s)", s.nfree, unit(c, s.nfree),
		       c->count, islands);
		return false;
	}
	choose(n, c, &s, pack, f);
	f->ok = true;
	return true;
}

void fit_apply(struct gpu_node *n, const struct claim *c, const struct fit *f)
{
	for (int k = 0; k < f->ndev; k++)
		gpu_hold(&n->dev[f->dev[k]], c->mode == CLAIM_SHARED, c->mem_mib, c->core);
	n->cpu_used += c->cpu_milli;
	n->mem_used += c->mem_mib_host;
	n->task_kinds |= claim_task_kind(c);
}

void fit_unapply(struct gpu_node *n, const struct claim *c, const struct fit *f)
{
	for (int k = 0; k < f->ndev; k++)
		gpu_unhold(&n->dev[f->dev[k]], c->mode == CLAIM_SHARED, c->mem_mib, c->core);
	n->cpu_used -= c->cpu_milli;
	n->mem_used -= c->mem_mib_host;
}

void fit_ids(const struct gpu_node *n, const struct fit *f, char *out, size_t size)
{
	size_t len = 0;
	out[0] = '\0';
	for (int k = 0; k < f->ndev && len < size; k++) {
		int w = snprintf(out + len, size - len, "%s%d", k ? "," : "", n->dev[f->dev[k]].id);
		if (w < 0)
			break;
		len += (size_t)w;
	}
}
