#include "cache.h"
#include "intern.h"
#include "keyset.h"
#include "slab.h"
#include "strmap.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The blocks a node's writer side shares with its views (devices' strings,
 * labels, allocations) each start with their reference count: one pair of
 * functions takes and drops a reference on any of them.
 */
static void *block_hold(void *b)
{
	if (b)
		atomic_fetch_add((atomic_int *)b, 1);
	return b;
}

static void block_release(void *b)
{
	if (b && atomic_fetch_sub((atomic_int *)b, 1) == 1)
		free(b);
}

/*
 * The devices' strings (UUIDs, models) of one GpuNodeStatus. They change
 * only with it, not with the node's usage: the writer side and every view
 * built from it share one copy. The UUIDs lie in the block, after info[].
 */
struct info_block {
	atomic_int refs;           /* first: block_hold, block_release */
	struct gpu_device_info info[];
};

/*
 * A Node's labels, packed: the array, then the strings no other node
 * shares. Cloud nodes carry two dozen (topology, instance type, pool...):
 * one block, shared by the writer side and every view built from it, where
 * a heap block for each string and a copy in each view took some 160 bytes
 * a label (bench --scale --labels 24). Keys and values most nodes repeat
 * point to one copy each (intern_label), and a value that is the node's
 * own name (its hostname label) is gpu_label_is_node_name: nodes labelled
 * alike then have the same array, kept once (cache.label_sets). A string
 * the pool has no room for, or longer than it keeps, lies in the block,
 * which is then the node's own.
 */
struct label_block {
	atomic_int refs;           /* first: block_hold, block_release */
	int n;
	struct label labels[];
};

/* At most this many label arrays are kept for sharing (each until the cache goes): a cluster has a few dozen. */
#define LABEL_SETS_MAX 1024

/* The key of an array of pooled labels in cache.label_sets: a hash of its pointers. */
static void label_set_key(const struct label *l, int n, char out[17])
{
	uint64_t h = 1469598103934665603ull;   /* FNV-1a over the pointers' bytes */
	const unsigned char *p = (const unsigned char *)l;
	for (size_t i = 0; i < (size_t)n * sizeof(*l); i++)
		h = (h ^ p[i]) * 1099511628211ull;
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* n's labels in a block, shared with the nodes labelled alike (found in sets) where it can be; NULL: no memory. */
static struct label_block *labels_pack(struct strmap *sets, const struct gpu_node *n)
{
	/* The labels as the pool has them (NULL: not there), then the block with room for the rest. */
	struct label *shared = calloc((size_t)n->nlabels + 1, sizeof(*shared));
	if (!shared)
		return NULL;
	size_t inline_len = 0;
	for (int i = 0; i < n->nlabels; i++) {
		const char *k = n->labels[i].key, *v = gpu_label_value(n, i);
		shared[i].key = (char *)intern_label(k);
		shared[i].value = (char *)(!strcmp(v, n->name) ? gpu_label_is_node_name : intern_label(v));
		inline_len += shared[i].key ? 0 : strlen(k) + 1;
		inline_len += shared[i].value ? 0 : strlen(v) + 1;
	}
	char key[17];
	struct label_block *b = NULL;
	if (!inline_len) {   /* every string pooled: an array another node may have */
		label_set_key(shared, n->nlabels, key);
		b = strmap_get(sets, key);
		if (b && b->n == n->nlabels && !memcmp(b->labels, shared, (size_t)n->nlabels * sizeof(*shared))) {
			free(shared);
			return block_hold(b);
		}
		b = NULL;
	}
	b = malloc(sizeof(*b) + (size_t)n->nlabels * sizeof(b->labels[0]) + inline_len);
	if (b) {
		atomic_init(&b->refs, 1);
		b->n = n->nlabels;
		char *at = (char *)(b->labels + n->nlabels);
		for (int i = 0; i < n->nlabels; i++) {
			b->labels[i] = shared[i];
			if (!b->labels[i].key) {
				b->labels[i].key = at;
				at = stpcpy(at, n->labels[i].key) + 1;
			}
			if (!b->labels[i].value) {
				b->labels[i].value = at;
				at = stpcpy(at, gpu_label_value(n, i)) + 1;
			}
		}
		/* (a key taken by another array, its hash alike: this one is not shared) */
		if (!inline_len && sets->len < LABEL_SETS_MAX && !strmap_get(sets, key) && !strmap_put(sets, key, b, NULL))
			block_hold(b);   /* the set's own */
	}
	free(shared);
	return b;
}

_Static_assert(offsetof(struct info_block, refs) == 0 && offsetof(struct label_block, refs) == 0 &&
		       offsetof(struct alloc_block, refs) == 0,
	       "block_hold and block_release find the count first");

/* Writer-side state of one node: the inputs its view is built from. */
struct node_src {
	char *name;                /* its key in cache.srcs */
	struct label_block *labels;   /* from the Node object; NULL while none was seen */
	/*
	 * The GpuNodeStatus: its devices' strings (info, NULL while none was
	 * seen), and its devices, islands and host (gpus) until a view is built
	 * from them; after that, the view holds them (src_gns): a second copy of
	 * every node's devices took some 540 bytes a node.
	 */
	struct info_block *info;
	struct gpu_node *gpus;     /* set since the last build, or NULL; its info is info->info */
	struct alloc_block *block; /* the allocations (src_recs), nallocs of them */
	int nallocs;
	struct alloc *assumed;     /* binds in flight (cache_assume) */
	int nassumed, assumed_cap;
	struct cache_node *view;   /* built from the above; NULL before the first build */
	bool stale;                /* the above changed since view was built */
	/* Where the current snapshot has it (in_snap): snapshot_node(snap_pos). */
	bool in_snap, dirty;
	size_t snap_pos;
	uint64_t gen[CACHE_KINDS]; /* relist generation each kind was last set in */
	uint32_t num;              /* its number in the owners index (owners.node) */
};

static struct alloc_rec *src_recs(const struct node_src *s)
{
	return s->block ? (struct alloc_rec *)s->block->data : NULL;
}

/* The record of the pod among s's, or NULL. */
static const struct alloc_rec *src_find(const struct node_src *s, const char *uid)
{
	const struct alloc_rec *r = src_recs(s);
	for (int i = 0; i < s->nallocs; i++, r = alloc_rec_next(r))
		if (!strcmp(alloc_rec_uid(r), uid))
			return r;
	return NULL;
}

/*
 * Which node holds a pod's newest record, found by the hash of the pod's
 * uid: 8 bytes a pod, where a map keeping the uids took about 90, and the
 * largest clusters hold 520,000 pods (a table of 2^20 slots). A slot's node
 * holds a record of the pod it was put for until the slot goes
 * (owners_forget), so a lookup checks the node's records for the uid, and
 * uids of one hash get a slot each. (Two such uids on one node would share
 * one: with 40-bit hashes, a case for the ledger, which decides every bind
 * anyway, not for planning.) A slot is the hash's low 40 bits and the
 * node's number (24 bits): a pointer and the whole hash took 16 bytes, 8
 * MiB more at that size. A number freed with its node may be given to
 * another; a slot left with it then names a node that lacks the pod, which
 * a lookup sees as it sees any other slot of the hash.
 */
typedef uint64_t owner_slot;

#define OWNER_NUM_BITS 24
#define OWNER_NUMS ((uint32_t)1 << OWNER_NUM_BITS)
#define OWNER_EMPTY 0u             /* numbers that name no node */
#define OWNER_GONE 1u
#define OWNER_FIRST 2u

struct owners {
	owner_slot *slot;
	size_t cap;                /* a power of two, or 0 */
	size_t used;               /* live and deleted slots */
	struct node_src **node;    /* by number; NULL: free */
	uint32_t nnodes, node_cap; /* numbers given so far (from OWNER_FIRST), room */
	uint32_t *free_num;        /* numbers of dropped nodes, to give again (room: node_cap) */
	uint32_t nfree;
};

static uint32_t slot_num(owner_slot sl)
{
	return (uint32_t)(sl & (OWNER_NUMS - 1));
}

static uint64_t slot_hash(owner_slot sl)
{
	return sl >> OWNER_NUM_BITS;
}

static owner_slot slot_make(uint64_t hash, uint32_t num)
{
	return (hash << OWNER_NUM_BITS) | num;
}

/* The uid's hash as a slot keeps it (40 bits). */
static uint64_t owner_hash(const char *uid)
{
	return strmap_hash(uid) & ((UINT64_C(1) << (64 - OWNER_NUM_BITS)) - 1);
}

static struct node_src *slot_src(const struct owners *o, owner_slot sl)
{
	uint32_t n = slot_num(sl);
	return n >= OWNER_FIRST ? o->node[n] : NULL;
}

/* Gives s a number; -1 when out of memory or out of numbers. */
static int owners_number(struct owners *o, struct node_src *s)
{
	if (o->nfree) {
		s->num = o->free_num[--o->nfree];
		o->node[s->num] = s;
		return 0;
	}
	uint32_t n = o->nnodes ? o->nnodes : OWNER_FIRST;
	if (n >= OWNER_NUMS)
		return -1;
	if (n >= o->node_cap) {
		uint32_t cap = o->node_cap ? o->node_cap * 2 : 64;
		struct node_src **node = realloc(o->node, (size_t)cap * sizeof(*node));
		uint32_t *free_num = node ? realloc(o->free_num, (size_t)cap * sizeof(*free_num)) : NULL;
		if (node)
			o->node = node;
		if (!free_num)
			return -1;
		o->free_num = free_num;
		o->node_cap = cap;
	}
	o->nnodes = n + 1;
	o->node[n] = s;
	s->num = n;
	return 0;
}

/* s goes: its number may be given to another node. */
static void owners_unnumber(struct owners *o, struct node_src *s)
{
	o->node[s->num] = NULL;
	o->free_num[o->nfree++] = s->num;
}

/* A GpuClaim object and the relist generation it was last set in. */
struct claim_entry {
	cJSON *obj;
	uint64_t gen;
};

struct cache {
	pthread_mutex_t write_lock;   /* serialises writers */
	pthread_mutex_t snap_lock;    /* guards `current` for acquire/swap only */
	struct snapshot *current;
	bool changed;                 /* something to publish at unlock */
	/* Nodes changed since the last publish, to patch into a copy of it; a node
	 * added, dropped or hidden (reshaped) needs the whole snapshot rebuilt. */
	struct node_src **dirty;
	size_t ndirty, dirty_cap;
	bool reshaped;
	uint64_t version;
	struct keyset srcs;           /* struct node_src *, by name; writer lock */
	struct owners owners;         /* pod uid -> node_src; writer lock */
	struct slab *slab;            /* the views' hot blocks */
	pthread_rwlock_t claims_lock;
	struct strmap claims;         /* "ns/name" -> struct claim_entry */
	struct strmap label_sets;     /* hash -> struct label_block * nodes labelled alike share (labels_pack); writer lock */
	uint64_t gen[CACHE_KINDS];    /* current relist generation per kind */
	uint32_t views_built;         /* the last view's id (cache_node.id); writer lock */
	void (*gained)(void *ctx, const char *node);   /* cache_on_gained */
	void *gained_ctx;
	char **gained_nodes;          /* views built that gained, told once published: a reader sees the gain */
	size_t ngained, gained_cap;
};

void alloc_set_pod(struct alloc *a, const char *ns, const char *name)
{
	/* "%s/%s" cut to fit, without printf: the reaper unpacks every reservation each pass. */
	size_t cap = sizeof(a->pod) - 1, n = strlen(ns), m = strlen(name);
	n = n < cap ? n : cap;
	memcpy(a->pod, ns, n);
	if (n && n < cap)
		a->pod[n++] = '/';
	m = m < cap - n ? m : cap - n;
	memcpy(a->pod + n, name, m);
	a->pod[n + m] = '\0';
}

int alloc_add_id(struct alloc *a, int id)
{
	if (a->ndev >= GPU_MAX_DEVICES || id < 0)
		return -1;
	if (!a->ndev) {
		a->id_base = id;
	} else if (id < a->id_base) {
		/* a new lowest id: the others move up */
		int shift = a->id_base - id;
		for (int k = 0; k < a->ndev; k++)
			if (a->id_off[k] + shift > ALLOC_ID_SPAN)
				return -1;
		for (int k = 0; k < a->ndev; k++)
			a->id_off[k] = (uint16_t)(a->id_off[k] + shift);
		a->id_base = id;
	} else if (id - a->id_base > ALLOC_ID_SPAN) {
		return -1;
	}
	a->id_off[a->ndev++] = (uint16_t)(id - a->id_base);
	return 0;
}

/* a->pod ("namespace/name") as names, split in buf (sizeof(a->pod)); no namespace when it has no '/'. */
static const struct alloc_names *pod_names(const struct alloc *a, struct alloc_names *x, char *buf)
{
	memcpy(buf, a->pod, sizeof(a->pod));
	buf[sizeof(a->pod) - 1] = '\0';
	char *slash = strchr(buf, '/');
	if (slash)
		*slash = '\0';
	*x = (struct alloc_names){ slash ? buf : "", slash ? slash + 1 : buf, "", "" };
	return x;
}

size_t alloc_rec_size(const struct alloc *a, const struct alloc_names *x)
{
	char buf[sizeof(a->pod)];
	struct alloc_names own;
	if (!x)
		x = pod_names(a, &own, buf);
	size_t n = offsetof(struct alloc_rec, id_off) + (size_t)a->ndev * sizeof(uint16_t) +
		   strnlen(a->uid, sizeof(a->uid) - 1) + strlen(x->ns) + strlen(x->name) + strlen(x->claim) +
		   strlen(x->gang) + 5;
	return (n + 7) & ~(size_t)7;
}

void alloc_rec_pack(const struct alloc *a, const struct alloc_names *x, int32_t gang_timeout_s,
		    struct alloc_rec *out)
{
	char buf[sizeof(a->pod)];
	struct alloc_names own;
	if (!x)
		x = pod_names(a, &own, buf);
	size_t size = alloc_rec_size(a, x);
	memset(out, 0, size);
	out->size = (uint16_t)size;
	out->mode = (uint8_t)a->mode;
	out->ndev = (uint8_t)a->ndev;
	out->mem_mib = a->mem_mib;
	out->core = a->core;
	out->id_base = a->id_base;
	out->since = a->since;
	out->token = a->token;
	out->gang_timeout_s = gang_timeout_s;
	memcpy(out->id_off, a->id_off, (size_t)a->ndev * sizeof(uint16_t));
	char *at = (char *)(out->id_off + a->ndev);
	size_t ulen = strnlen(a->uid, sizeof(a->uid) - 1);
	memcpy(at, a->uid, ulen);
	at += ulen + 1;
	at = stpcpy(at, x->ns) + 1;
	at = stpcpy(at, x->name) + 1;
	at = stpcpy(at, x->claim) + 1;
	stpcpy(at, x->gang);
}

void alloc_rec_names(const struct alloc_rec *r, struct alloc_names *out)
{
	const char *at = alloc_rec_uid(r);
	const char **field[] = { &out->ns, &out->name, &out->claim, &out->gang };
	for (size_t k = 0; k < sizeof(field) / sizeof(field[0]); k++) {
		at += strlen(at) + 1;
		*field[k] = at;
	}
}

void alloc_rec_unpack(const struct alloc_rec *r, struct alloc *out)
{
	memset(out, 0, sizeof(*out));
	out->mode = (enum claim_mode)r->mode;
	out->ndev = r->ndev;
	out->mem_mib = r->mem_mib;
	out->core = r->core;
	out->id_base = r->id_base;
	out->since = r->since;
	out->token = r->token;
	memcpy(out->id_off, r->id_off, (size_t)r->ndev * sizeof(uint16_t));
	const char *uid = alloc_rec_uid(r);
	memcpy(out->uid, uid, strnlen(uid, sizeof(out->uid) - 1));
	struct alloc_names x;
	alloc_rec_names(r, &x);
	alloc_set_pod(out, x.ns, x.name);
}

struct alloc_block *alloc_block_new(size_t cap)
{
	struct alloc_block *b = malloc(sizeof(*b) + cap);
	if (b) {
		atomic_init(&b->refs, 1);
		b->len = 0;
		b->cap = cap;
	}
	return b;
}

void alloc_block_release(struct alloc_block *b)
{
	block_release(b);
}

int alloc_block_append(struct alloc_block *b, const struct alloc *a, const struct alloc_names *x,
		       int32_t gang_timeout_s)
{
	size_t size = alloc_rec_size(a, x);
	if (b->len + size > b->cap)
		return -1;
	alloc_rec_pack(a, x, gang_timeout_s, (struct alloc_rec *)((char *)b->data + b->len));
	b->len += size;
	return 0;
}

void alloc_ids(const struct alloc *a, char *out, size_t size)
{
	size_t len = 0;
	out[0] = '\0';
	for (int k = 0; k < a->ndev && len < size; k++) {
		int w = snprintf(out + len, size - len, "%s%d", k ? "," : "", alloc_id(a, k));
		if (w < 0)
			break;
		len += (size_t)w;
	}
}

/* ---- node views ---------------------------------------------------------- */

static void view_release(struct cache_node *v)
{
	/* A view is two blocks (view_build): the hot one and the cold one, its own allocs if any. */
	if (v && atomic_fetch_sub(&v->refs, 1) == 1) {
		block_release(v->info);
		block_release(v->labels);
		if (v->block)
			block_release(v->block);
		else
			free((void *)v->allocs);
		slab_release(v->slab, v, v->hot_size);
	}
}

void alloc_apply(struct gpu_node *n, const struct alloc *a)
{
	for (int k = 0; k < a->ndev; k++) {
		int i = gpu_node_find_device(n, alloc_id(a, k));
		if (i >= 0)   /* else the device is gone from the GpuNodeStatus */
			gpu_hold(&n->dev[i], a->mode == CLAIM_SHARED, a->mem_mib, a->core);
	}
}

void alloc_unapply(struct gpu_node *n, const struct alloc *a)
{
	for (int k = 0; k < a->ndev; k++) {
		int i = gpu_node_find_device(n, alloc_id(a, k));
		if (i >= 0)
			gpu_unhold(&n->dev[i], a->mode == CLAIM_SHARED, a->mem_mib, a->core);
	}
}

/* Bump allocator over one block. */
struct arena {
	char *base;
	size_t off;
};

static void *arena_take(struct arena *a, size_t n, size_t align)
{
	a->off = (a->off + align - 1) & ~(align - 1);
	void *p = a->base ? a->base + a->off : NULL;
	a->off += n;
	return p;
}

static char *arena_str(struct arena *a, const char *str)
{
	size_t n = strlen(str) + 1;
	char *p = arena_take(a, n, 1);
	if (p)
		memcpy(p, str, n);
	return p;
}

/*
 * The node's GpuNodeStatus as given (devices without usage, islands, host),
 * or NULL when none was seen: the one set since the last build, or else the
 * current view's node, whose devices then carry the allocations' usage
 * (*built: the caller leaves it out, gpu_clear_usage). A GpuNodeStatus
 * carries no usage of its own (cache_set_gpus clears it).
 */
static const struct gpu_node *src_gns(const struct node_src *s, bool *built)
{
	*built = !s->gpus;
	if (s->gpus)
		return s->gpus;
	return s->info && s->view ? s->view->node : NULL;
}

/* An assumed allocation counts until the pod's own record is there. */
static bool assumed_counts(const struct node_src *s, const struct alloc *a)
{
	return !src_find(s, a->uid);
}

uint64_t cache_uid_bits(const char *uid)
{
	/* Four bits: fewer false "maybe"s for a node's 8 whole-GPU pods (2.5 %) than two (4.5 %). */
	size_t h = strmap_hash(uid);
	return (1ULL << (h & 63)) | (1ULL << ((h >> 6) & 63)) | (1ULL << ((h >> 12) & 63)) | (1ULL << ((h >> 18) & 63));
}

/* Whether device d can take a's part of it beside what it holds already. */
static bool device_takes(const struct gpu_device *d, const struct alloc *a)
{
	if (!gpu_usable(d) || d->exclusive)
		return false;
	if (a->mode == CLAIM_SHARED)
		return gpu_free_mib(d) >= a->mem_mib && gpu_free_core(d) >= a->core;
	return !d->shared;
}

/*
 * A bind in flight, counted on the devices its filter chose: the ledger may
 * have given one of them to another pod since (it decides without the binds
 * in flight). Such a device moves to one that can take it, so that the view
 * counts every pod once: a device held twice would leave another looking
 * free, and the next filter send a pod there that its bind refuses. (Which
 * device does not matter: the pod's record, when it comes, replaces this.)
 */
static void assumed_relocate(const struct gpu_node *n, struct alloc *a)
{
	if (a->mode != CLAIM_EXCLUSIVE && a->mode != CLAIM_SHARED)
		return;
	int ids[GPU_MAX_DEVICES];
	bool moved = false, taken[GPU_MAX_DEVICES] = { false };
	for (int k = 0; k < a->ndev; k++) {
		ids[k] = alloc_id(a, k);
		int i = gpu_node_find_device(n, ids[k]);
		if (i >= 0)
			taken[i] = true;
	}
	for (int k = 0; k < a->ndev; k++) {
		int i = gpu_node_find_device(n, ids[k]);
		if (i < 0 || device_takes(&n->dev[i], a))
			continue;
		for (int j = 0; j < n->ndev; j++) {
			if (!taken[j] && device_takes(&n->dev[j], a)) {
				taken[j] = true;
				ids[k] = n->dev[j].id;
				moved = true;
				break;
			}
		}
	}
	struct alloc b = *a;
	b.ndev = 0;
	for (int k = 0; moved && k < a->ndev; k++)
		if (alloc_add_id(&b, ids[k]))
			return;   /* ids too far apart to record: left as they were */
	if (moved)
		*a = b;
}

/*
 * Lays a node's view out in two blocks. The hot one holds what requests
 * read, in the order they read it: header, node, devices and islands (a
 * fit), then the name (for output: lookups compare the index's copy). The
 * cold one holds the allocations, when binds in flight add to the writer's
 * (the devices' strings and the labels are the writer's blocks). Requests
 * read every node of a big cluster; a few hundred hot bytes per node keep
 * that scan in cache and off the TLB's limits. Run once to measure (bases
 * NULL), once to fill.
 */
static struct cache_node *view_layout(struct arena *hot, struct arena *cold, const struct node_src *s)
{
	bool built;
	const struct gpu_node *g = src_gns(s, &built);
	int ndev = g ? g->ndev : 0, nisland = g ? g->nisland : 0;
	struct cache_node *v = arena_take(hot, sizeof(*v), 64);
	struct gpu_node *n = arena_take(hot, sizeof(*n), 8);
	struct gpu_device *dev = arena_take(hot, (size_t)ndev * sizeof(*dev), 32);
	struct gpu_island *islands = arena_take(hot, (size_t)nisland * sizeof(*islands), 8);
	size_t fit_size = hot->off;
	char *name = arena_str(hot, s->name);
	int nallocs = s->nallocs;
	size_t assumed_len = 0;
	for (int i = 0; i < s->nassumed; i++)
		if (assumed_counts(s, &s->assumed[i])) {
			nallocs++;
			assumed_len += alloc_rec_size(&s->assumed[i], NULL);
		}
	/* The writer's block as is, unless binds in flight add to it: then a copy. */
	bool own = nallocs > s->nallocs;
	size_t len = s->block ? s->block->len : 0;
	struct alloc_rec *allocs = own ? arena_take(cold, len + assumed_len, 8) : src_recs(s);
	if (!hot->base)
		return NULL;
	memset(v, 0, sizeof(*v));
	atomic_init(&v->refs, 1);
	v->fit_size = (uint16_t)fit_size;
	v->info = block_hold(s->info);
	v->labels = block_hold(s->labels);
	v->has_node = s->labels != NULL;
	v->has_gns = g != NULL;
	if (g)
		*n = *g;
	else
		memset(n, 0, sizeof(*n));
	n->name = name;
	n->ndev = ndev;
	n->dev = dev;
	n->info = s->info ? s->info->info : NULL;
	n->nisland = nisland;
	n->islands = islands;
	n->nlabels = s->labels ? s->labels->n : 0;
	n->labels = s->labels ? s->labels->labels : NULL;
	if (ndev)
		memcpy(dev, g->dev, (size_t)ndev * sizeof(*dev));
	for (int i = 0; built && i < ndev; i++)
		gpu_clear_usage(&dev[i]);
	if (nisland)
		memcpy(islands, g->islands, (size_t)nisland * sizeof(*islands));
	if (own && len)
		memcpy(allocs, src_recs(s), len);
	else if (!own && s->block)
		v->block = block_hold(s->block);
	v->node = n;
	v->allocs = allocs;
	v->nallocs = nallocs;
	v->nassumed = (uint16_t)(nallocs - s->nallocs);
	const struct alloc_rec *r = allocs;
	for (int i = 0; i < s->nallocs; i++, r = alloc_rec_next(r)) {
		struct alloc a;
		alloc_rec_unpack(r, &a);
		alloc_apply(n, &a);
		v->uid_bits |= cache_uid_bits(alloc_rec_uid(r));
	}
	/* The binds in flight after the records, each where the view still has room. */
	char *end = own ? (char *)allocs + len : NULL;   /* (allocs is NULL for a node with none) */
	for (int i = 0; own && i < s->nassumed; i++) {
		if (!assumed_counts(s, &s->assumed[i]))
			continue;
		struct alloc a = s->assumed[i];
		assumed_relocate(n, &a);
		alloc_apply(n, &a);
		alloc_rec_pack(&a, NULL, 0, (struct alloc_rec *)end);
		end += ((struct alloc_rec *)end)->size;
		v->uid_bits |= cache_uid_bits(a.uid);
	}
	v->state = gpu_node_state_digest(n);
	fit_whole_count(n, &v->whole);
	return v;
}

static struct cache_node *view_build(struct cache *cache, const struct node_src *s)
{
	struct arena hot = { NULL, 0 }, cold = { NULL, 0 };
	view_layout(&hot, &cold, s);
	size_t hot_size = hot.off;
	if (hot_size > UINT16_MAX)   /* cannot be: the limits on devices, islands and names keep it under 5 KiB */
		return NULL;
	void *h = slab_alloc(cache->slab, hot_size);
	void *c = cold.off ? malloc(cold.off) : NULL;   /* most views need none */
	if ((cold.off && !c) || !h) {
		free(c);
		slab_release(cache->slab, h, hot_size);
		return NULL;
	}
	hot = (struct arena){ h, 0 };
	cold = (struct arena){ c, 0 };
	struct cache_node *v = view_layout(&hot, &cold, s);
	v->slab = cache->slab;
	v->hot_size = (uint16_t)hot_size;
	v->id = ++cache->views_built;
	return v;
}

/* Keeps a node's name to tell the hook once the view that gained is published. */
static void note_gained(struct cache *c, const char *name)
{
	if (c->ngained == c->gained_cap) {
		size_t cap = c->gained_cap ? c->gained_cap * 2 : 16;
		char **g = realloc(c->gained_nodes, cap * sizeof(*g));
		if (!g)
			return;   /* (out of memory: this gain goes untold) */
		c->gained_nodes = g;
		c->gained_cap = cap;
	}
	char *copy = strdup(name);
	if (copy)
		c->gained_nodes[c->ngained++] = copy;
}

/* After a publish: the hook told of each node that gained. */
static void tell_gained(struct cache *c)
{
	for (size_t i = 0; i < c->ngained; i++) {
		if (c->gained)
			c->gained(c->gained_ctx, c->gained_nodes[i]);
		free(c->gained_nodes[i]);
	}
	c->ngained = 0;
}

/*
 * s's view, rebuilt when stale; NULL when out of memory (the stale one then
 * stays: it may hold the node's devices).
 */
static struct cache_node *src_view(struct cache *c, struct node_src *s)
{
	if (s->view && !s->stale)
		return s->view;
	struct cache_node *v = view_build(c, s);
	if (!v)
		return NULL;
	if (c->gained && gpu_node_gained(s->view ? s->view->node : NULL, v->node))
		note_gained(c, s->name);
	view_release(s->view);
	s->view = v;
	s->stale = false;
	if (s->gpus) {   /* the view holds its devices now */
		s->gpus->info = NULL;   /* the block's, not the node's */
		gpu_node_free(s->gpus);
		s->gpus = NULL;
	}
	return v;
}

/* ---- snapshots ----------------------------------------------------------- */

static size_t chunks_for(size_t n)
{
	return (n + SNAPSHOT_CHUNK - 1) / SNAPSHOT_CHUNK;
}

static void chunk_release(struct snapshot_chunk *k)
{
	if (k && atomic_fetch_sub(&k->refs, 1) == 1) {
		for (int i = 0; i < SNAPSHOT_CHUNK; i++)
			view_release(k->node[i]);
		free(k);
	}
}

static void index_release(struct snapshot_index *x)
{
	if (x && atomic_fetch_sub(&x->refs, 1) == 1) {
		free(x->names);
		free(x);
	}
}

void snapshot_release(struct snapshot *s)
{
	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	for (size_t k = 0; s->chunks && k < chunks_for(s->n); k++)
		chunk_release(s->chunks[k]);
	free(s->chunks);
	index_release(s->index);
	free(s);
}

static const struct cache_node *find_hashed(const struct snapshot *s, const char *name, size_t h)
{
	size_t mask = s->index->cap - 1;
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		const struct snapshot_slot *slot = &s->index->slot[i];
		if (!slot->name)
			return NULL;
		if (slot->hash == h && !strcmp(slot->name, name))
			return snapshot_node(s, slot->pos);
	}
}

const struct cache_node *snapshot_find(const struct snapshot *s, const char *name)
{
	return s->index ? find_hashed(s, name, strmap_hash(name)) : NULL;
}

/*
 * How many lookups ahead a name's index slot is fetched, and then, from the
 * slot its hash lands on (most often its own), the name and the node's
 * place in its chunk.
 */
#define SLOT_AHEAD 16
#define NODE_AHEAD 8

void snapshot_find_all(const struct snapshot *s, const char *const *names, int n,
		       const struct cache_node **out)
{
	size_t *hash = s->index && n > 0 ? malloc((size_t)n * sizeof(*hash)) : NULL;
	if (!hash) {
		for (int i = 0; i < n; i++)
			out[i] = snapshot_find(s, names[i]);
		return;
	}
	size_t mask = s->index->cap - 1;
	for (int i = 0; i < n; i++)
		hash[i] = strmap_hash(names[i]);
	for (int i = 0; i < n && i < SLOT_AHEAD; i++)
		__builtin_prefetch(&s->index->slot[hash[i] & mask]);
	for (int i = 0; i < n; i++) {
		if (i + SLOT_AHEAD < n)
			__builtin_prefetch(&s->index->slot[hash[i + SLOT_AHEAD] & mask]);
		if (i + NODE_AHEAD < n) {
			const struct snapshot_slot *ahead = &s->index->slot[hash[i + NODE_AHEAD] & mask];
			if (ahead->name) {
				__builtin_prefetch(ahead->name);
				__builtin_prefetch(&s->chunks[ahead->pos / SNAPSHOT_CHUNK]->node[ahead->pos % SNAPSHOT_CHUNK]);
			}
		}
		if ((out[i] = find_hashed(s, names[i], hash[i])))
			__builtin_prefetch(out[i]);
	}
	free(hash);
}

static bool src_visible(const struct node_src *s)
{
	return s->labels || s->info;
}

/* Builds a snapshot of every visible node, with a new index; NULL when out of memory. */
static struct snapshot *snapshot_build(struct cache *c)
{
	struct snapshot *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	atomic_init(&s->refs, 1);
	s->version = ++c->version;
	size_t cap = 16, names = 1;
	while (cap < c->srcs.len * 2)
		cap *= 2;
	struct node_src *src;
	for (size_t pos = 0; (src = keyset_next(&c->srcs, &pos));)
		names += strlen(src->name) + 1;
	s->chunks = calloc(chunks_for(c->srcs.len) + 1, sizeof(*s->chunks));
	s->index = calloc(1, sizeof(*s->index) + cap * sizeof(s->index->slot[0]));
	if (!s->chunks || !s->index || !(s->index->names = malloc(names)))
		goto fail;
	atomic_init(&s->index->refs, 1);
	s->index->cap = cap;
	char *name = s->index->names;
	for (size_t pos = 0; (src = keyset_next(&c->srcs, &pos));) {
		if (!src_visible(src))
			continue;
		if (!src_view(c, src))
			goto fail;
		struct snapshot_chunk **k = &s->chunks[s->n / SNAPSHOT_CHUNK];
		if (!*k) {
			if (!(*k = calloc(1, sizeof(**k))))
				goto fail;
			atomic_init(&(*k)->refs, 1);
		}
		atomic_fetch_add(&src->view->refs, 1);
		(*k)->node[s->n % SNAPSHOT_CHUNK] = src->view;
		size_t len = strlen(src->name) + 1, h = strmap_hash(src->name), i = h & (cap - 1);
		memcpy(name, src->name, len);
		while (s->index->slot[i].name)
			i = (i + 1) & (cap - 1);
		s->index->slot[i] = (struct snapshot_slot){ h, name, s->n };
		name += len;
		src->snap_pos = s->n++;
	}
	for (size_t pos = 0; (src = keyset_next(&c->srcs, &pos));) {
		src->in_snap = src_visible(src);
		src->dirty = false;
	}
	c->ndirty = 0;
	c->reshaped = false;
	return s;
fail:
	c->reshaped = true;   /* some positions above are not the current snapshot's */
	snapshot_release(s);
	return NULL;
}

/*
 * The current snapshot with the dirty nodes' new views in place: its index
 * shared, its chunks shared but those of the dirty nodes, which are copied.
 * Not a walk of every node with its name hashed again (5 ms at 65000 nodes,
 * for each ledger event), nor a reference taken on every node. NULL when it
 * cannot (the set of nodes changed, or out of memory): then snapshot_build.
 */
static struct snapshot *snapshot_patch(struct cache *c)
{
	const struct snapshot *old = c->current;
	if (!old || c->reshaped)
		return NULL;
	for (size_t k = 0; k < c->ndirty; k++) {
		struct node_src *src = c->dirty[k];
		if (src_visible(src) != src->in_snap || (src->in_snap && !src_view(c, src)))
			return NULL;
	}
	size_t nk = chunks_for(old->n);
	struct snapshot *s = calloc(1, sizeof(*s));
	if (!s || !(s->chunks = malloc((nk + 1) * sizeof(*s->chunks)))) {
		free(s);
		return NULL;
	}
	/* Everything of the old one shared first; a dirty node's chunk is copied when first met. */
	atomic_init(&s->refs, 1);
	s->n = old->n;
	memcpy(s->chunks, old->chunks, nk * sizeof(*s->chunks));
	for (size_t k = 0; k < nk; k++)
		atomic_fetch_add(&s->chunks[k]->refs, 1);
	s->index = old->index;
	atomic_fetch_add(&s->index->refs, 1);
	for (size_t d = 0; d < c->ndirty; d++) {
		struct node_src *src = c->dirty[d];
		if (!src->in_snap)
			continue;
		size_t k = src->snap_pos / SNAPSHOT_CHUNK;
		if (s->chunks[k] == old->chunks[k]) {
			struct snapshot_chunk *copy = malloc(sizeof(*copy));
			if (!copy) {
				snapshot_release(s);
				return NULL;
			}
			atomic_init(&copy->refs, 1);
			memcpy(copy->node, old->chunks[k]->node, sizeof(copy->node));
			for (int i = 0; i < SNAPSHOT_CHUNK; i++)
				if (copy->node[i])
					atomic_fetch_add(&copy->node[i]->refs, 1);
			chunk_release(s->chunks[k]);   /* the old snapshot still holds it */
			s->chunks[k] = copy;
		}
		struct cache_node **at = &s->chunks[k]->node[src->snap_pos % SNAPSHOT_CHUNK];
		atomic_fetch_add(&src->view->refs, 1);
		view_release(*at);   /* the old snapshot's chunk still holds it */
		*at = src->view;
	}
	for (size_t d = 0; d < c->ndirty; d++)
		c->dirty[d]->dirty = false;
	s->version = ++c->version;
	c->ndirty = 0;
	return s;
}

struct snapshot *cache_acquire(struct cache *c)
{
	pthread_mutex_lock(&c->snap_lock);
	struct snapshot *s = c->current;
	atomic_fetch_add(&s->refs, 1);
	pthread_mutex_unlock(&c->snap_lock);
	return s;
}

/* ---- lifecycle ----------------------------------------------------------- */

static const char *src_name_of(const void *rec)
{
	return ((const struct node_src *)rec)->name;
}

struct cache *cache_new(void)
{
	struct cache *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	pthread_mutex_init(&c->write_lock, NULL);
	pthread_mutex_init(&c->snap_lock, NULL);
	pthread_rwlock_init(&c->claims_lock, NULL);
	keyset_init(&c->srcs, src_name_of);
	memset(&c->owners, 0, sizeof(c->owners));
	strmap_init(&c->claims);
	strmap_init(&c->label_sets);
	c->slab = slab_new();
	c->current = c->slab ? snapshot_build(c) : NULL;
	if (!c->current) {
		slab_free(c->slab);
		free(c);
		return NULL;
	}
	return c;
}

/*
 * Sets the node's GpuNodeStatus (NULL: removes it): n's info moves to a
 * block of its own, and n waits in s->gpus for the next build. -1: out of
 * memory (s unchanged).
 */
static int src_set_gpus(struct node_src *s, struct gpu_node *n)
{
	struct info_block *b = NULL;
	if (n) {
		size_t uuids = 0;
		for (int i = 0; i < n->ndev; i++) {
			gpu_clear_usage(&n->dev[i]);   /* the allocations give it */
			uuids += strlen(n->info[i].uuid) + 1;
		}
		b = malloc(sizeof(*b) + (size_t)n->ndev * sizeof(b->info[0]) + uuids);
		if (!b)
			return -1;
		atomic_init(&b->refs, 1);
		char *at = (char *)(b->info + n->ndev);
		for (int i = 0; i < n->ndev; i++) {
			size_t len = strlen(n->info[i].uuid) + 1;
			b->info[i] = n->info[i];
			b->info[i].uuid = memcpy(at, n->info[i].uuid, len);
			at += len;
			free((void *)n->info[i].uuid);
		}
		free(n->info);
		n->info = b->info;
	}
	if (s->gpus)
		s->gpus->info = NULL;   /* the block's, not the node's */
	gpu_node_free(s->gpus);
	block_release(s->info);
	s->gpus = n;
	s->info = b;
	return 0;
}

static void src_free(struct node_src *s)
{
	block_release(s->labels);
	src_set_gpus(s, NULL);
	block_release(s->block);
	free(s->assumed);
	view_release(s->view);
	free(s->name);
	free(s);
}

void cache_free(struct cache *c)
{
	if (!c)
		return;
	const char *key;
	void *val;
	for (size_t pos = 0; (val = keyset_next(&c->srcs, &pos));)
		src_free(val);
	for (size_t pos = 0; strmap_next(&c->claims, &pos, &key, &val);) {
		cJSON_Delete(((struct claim_entry *)val)->obj);
		free(val);
	}
	keyset_release(&c->srcs);
	for (size_t pos = 0; strmap_next(&c->label_sets, &pos, &key, &val);)
		block_release(val);
	strmap_release(&c->label_sets);
	free(c->dirty);
	free(c->owners.slot);
	free(c->owners.node);
	free(c->owners.free_num);
	strmap_release(&c->claims);
	snapshot_release(c->current);
	slab_free(c->slab);      /* every view is released by now */
	for (size_t i = 0; i < c->ngained; i++)
		free(c->gained_nodes[i]);
	free(c->gained_nodes);
	pthread_mutex_destroy(&c->write_lock);
	pthread_mutex_destroy(&c->snap_lock);
	pthread_rwlock_destroy(&c->claims_lock);
	free(c);
}

/* ---- writers ------------------------------------------------------------- */

void cache_lock(struct cache *c)
{
	pthread_mutex_lock(&c->write_lock);
}

void cache_unlock(struct cache *c)
{
	if (c->changed) {
		struct snapshot *s = snapshot_patch(c);
		if (!s)
			s = snapshot_build(c);
		if (s) {
			pthread_mutex_lock(&c->snap_lock);
			struct snapshot *old = c->current;
			c->current = s;
			pthread_mutex_unlock(&c->snap_lock);
			snapshot_release(old);
			c->changed = false;
			tell_gained(c);
		}
		/* Out of memory: keep the old snapshot and retry at the next unlock. */
	}
	pthread_mutex_unlock(&c->write_lock);
}

static struct node_src *src_get(struct cache *c, const char *name, bool create)
{
	struct node_src *s = keyset_get(&c->srcs, name);
	if (s || !create)
		return s;
	s = calloc(1, sizeof(*s));
	if (!s || !(s->name = strdup(name)) || owners_number(&c->owners, s)) {
		if (s)
			free(s->name);
		free(s);
		return NULL;
	}
	if (keyset_put(&c->srcs, s, NULL)) {
		owners_unnumber(&c->owners, s);
		free(s->name);
		free(s);
		return NULL;
	}
	return s;
}

static void src_touch(struct cache *c, struct node_src *s)
{
	s->stale = true;
	if (!s->info) {   /* no devices to keep: the view can go now */
		view_release(s->view);
		s->view = NULL;
	}
	c->changed = true;
	if (s->dirty || c->reshaped)
		return;
	if (c->ndirty == c->dirty_cap) {
		size_t cap = c->dirty_cap ? c->dirty_cap * 2 : 64;
		struct node_src **d = realloc(c->dirty, cap * sizeof(*d));
		if (!d) {
			c->reshaped = true;   /* rebuilt whole instead */
			return;
		}
		c->dirty = d;
		c->dirty_cap = cap;
	}
	c->dirty[c->ndirty++] = s;
	s->dirty = true;
}

/* Forgets a node that has neither objects nor allocations any more. */
static void src_maybe_drop(struct cache *c, struct node_src *s)
{
	if (s->labels || s->info || s->nallocs)
		return;
	/* The dirty list may hold it: the next publish rebuilds without reading the list. */
	if (s->dirty || s->in_snap)
		c->reshaped = true;
	c->changed = c->changed || s->in_snap;
	keyset_del(&c->srcs, s->name);
	owners_unnumber(&c->owners, s);
	src_free(s);
}

/* Replaces the node's part of kind k (CACHE_NODES: s->labels, CACHE_GPUS: s->gpus); NULL removes it. */
static int src_set_part(struct cache *c, const char *name, enum cache_kind k, struct gpu_node *n)
{
	struct node_src *s = src_get(c, name, n != NULL);
	if (!s) {
		gpu_node_free(n);
		return n ? -1 : 0;
	}
	if (k == CACHE_NODES) {
		struct label_block *b = n ? labels_pack(&c->label_sets, n) : NULL;
		bool packed = b || !n;
		gpu_node_free(n);
		if (!packed)
			return -1;
		block_release(s->labels);
		s->labels = b;
	} else if (src_set_gpus(s, n)) {
		gpu_node_free(n);
		return -1;
	}
	s->gen[k] = c->gen[k];
	src_touch(c, s);
	src_maybe_drop(c, s);
	return 0;
}

int cache_set_node(struct cache *c, const char *name, struct gpu_node *n)
{
	return src_set_part(c, name, CACHE_NODES, n);
}

int cache_set_gpus(struct cache *c, const char *name, struct gpu_node *devices)
{
	return src_set_part(c, name, CACHE_GPUS, devices);
}

/* Room for n allocations in *arr. */
static int allocs_reserve(struct alloc **arr, int *have, int n)
{
	if (n <= *have)
		return 0;
	int cap = *have ? *have : 4;
	while (cap < n)
		cap *= 2;
	struct alloc *a = realloc(*arr, (size_t)cap * sizeof(*a));
	if (!a)
		return -1;
	*arr = a;
	*have = cap;
	return 0;
}

/*
 * Room for `need` bytes of records in a block of s's own (no view or
 * ledger holds it). A block another holds is copied with room for exactly
 * `need`: the publish after the change shares the copy with the views, so
 * the next change copies it again and room to spare would only lie idle
 * (at 65,000 nodes of 8 binds each, blocks of 1 KiB for 700 bytes of
 * records were 20 MiB). A block of its own (changes between two
 * publishes) grows by doubling. -1: out of memory.
 */
static int src_reserve(struct node_src *s, size_t need)
{
	struct alloc_block *b = s->block;
	bool own = b && atomic_load(&b->refs) == 1;
	if (own && need <= b->cap)
		return 0;
	size_t cap = own && b->cap ? b->cap : need;
	while (cap < need)
		cap *= 2;
	struct alloc_block *nb = alloc_block_new(cap);
	if (!nb)
		return -1;
	nb->len = b ? b->len : 0;
	if (nb->len)
		memcpy(nb->data, b->data, nb->len);
	block_release(b);
	s->block = nb;
	return 0;
}

/* Appends a's record to s's (the caller reserved its room). */
static void src_append(struct node_src *s, const struct alloc *a)
{
	alloc_block_append(s->block, a, NULL, 0);
	s->nallocs++;
}

/* The slot of the pod's node, or NULL; *rec (when asked) gets the pod's record there. */
static owner_slot *owners_find(const struct owners *o, const char *uid, const struct alloc_rec **rec)
{
	if (!o->cap)
		return NULL;
	uint64_t h = owner_hash(uid);
	for (size_t i = h & (o->cap - 1);; i = (i + 1) & (o->cap - 1)) {
		owner_slot *sl = &o->slot[i];
		if (slot_num(*sl) == OWNER_EMPTY)
			return NULL;
		struct node_src *s = slot_hash(*sl) == h ? slot_src(o, *sl) : NULL;
		const struct alloc_rec *r = s ? src_find(s, uid) : NULL;
		if (r) {
			if (rec)
				*rec = r;
			return sl;
		}
	}
}

/*
 * Room for one slot more, with at most three quarters of the slots in use
 * (live or deleted): then the live slots move to a table where they fill
 * at most half, twice as big, or as big when most of them were deleted.
 * Half full at most took 32 MiB at 520,000 pods, 64 bytes a pod, with
 * slots of 16 bytes. -1: no memory.
 */
static int owners_room(struct owners *o)
{
	if ((o->used + 1) * 4 <= o->cap * 3)
		return 0;
	size_t live = 0;
	for (size_t i = 0; i < o->cap; i++)
		live += slot_num(o->slot[i]) >= OWNER_FIRST;
	size_t cap = o->cap ? o->cap : 64;
	if ((live + 1) * 4 > cap)
		cap *= 2;
	while ((live + 1) * 2 > cap)
		cap *= 2;
	owner_slot *slot = calloc(cap, sizeof(*slot));
	if (!slot)
		return -1;
	for (size_t i = 0; i < o->cap; i++) {
		owner_slot sl = o->slot[i];
		if (slot_num(sl) < OWNER_FIRST)
			continue;
		size_t k = slot_hash(sl) & (cap - 1);
		while (slot_num(slot[k]) != OWNER_EMPTY)
			k = (k + 1) & (cap - 1);
		slot[k] = sl;
	}
	free(o->slot);
	o->slot = slot;
	o->cap = cap;
	o->used = live;
	return 0;
}

/* The pod's newest record is s's (about to be appended). -1: no memory. */
static int owners_put(struct owners *o, const char *uid, struct node_src *s)
{
	uint64_t h = owner_hash(uid);
	owner_slot *sl = owners_find(o, uid, NULL);
	if (sl) {
		*sl = slot_make(h, s->num);
		return 0;
	}
	if (owners_room(o))
		return -1;
	size_t i = h & (o->cap - 1);
	while (slot_num(o->slot[i]) >= OWNER_FIRST)
		i = (i + 1) & (o->cap - 1);
	o->used += slot_num(o->slot[i]) == OWNER_EMPTY;
	o->slot[i] = slot_make(h, s->num);
	return 0;
}

/* The index keeps the pod's newest record; an older one elsewhere leaves it. */
static void owners_forget(struct cache *c, struct node_src *s, const char *uid)
{
	owner_slot *sl = owners_find(&c->owners, uid, NULL);
	if (sl && slot_num(*sl) == s->num)
		*sl = slot_make(slot_hash(*sl), OWNER_GONE);
}

/* Removes the record r points into (a record of s's). -1: out of memory (kept). */
static int src_remove(struct cache *c, struct node_src *s, const struct alloc_rec *r)
{
	size_t off = (size_t)((const char *)r - (const char *)s->block->data);
	if (src_reserve(s, s->block->len))
		return -1;
	struct alloc_rec *mine = (struct alloc_rec *)((char *)s->block->data + off);
	owners_forget(c, s, alloc_rec_uid(mine));
	size_t size = mine->size;
	memmove(mine, (char *)mine + size, s->block->len - off - size);
	s->block->len -= size;
	s->nallocs--;
	src_touch(c, s);
	return 0;
}

/* Drops all of s's records (views may still hold their block). */
static void src_clear(struct cache *c, struct node_src *s)
{
	const struct alloc_rec *r = src_recs(s);
	for (int i = 0; i < s->nallocs; i++, r = alloc_rec_next(r))
		owners_forget(c, s, alloc_rec_uid(r));
	s->nallocs = 0;
	block_release(s->block);
	s->block = NULL;
	src_touch(c, s);
}

bool cache_remove_alloc(struct cache *c, const char *uid, const char *node)
{
	const struct alloc_rec *r = NULL;
	struct node_src *s;
	if (node) {
		s = keyset_get(&c->srcs, node);
		r = s ? src_find(s, uid) : NULL;
	} else {
		owner_slot *sl = owners_find(&c->owners, uid, &r);
		s = sl ? slot_src(&c->owners, *sl) : NULL;
	}
	if (!r || src_remove(c, s, r))
		return false;   /* none there, or out of memory: kept */
	src_maybe_drop(c, s);
	return true;
}

/* Whether r is a's allocation: the same devices, mode, share and time. */
static bool rec_is(const struct alloc_rec *r, const struct alloc *a)
{
	return r->mode == a->mode && r->mem_mib == a->mem_mib && r->core == a->core && r->since == a->since &&
	       r->token == a->token &&
	       r->ndev == a->ndev && r->id_base == a->id_base &&
	       !memcmp(r->id_off, a->id_off, (size_t)a->ndev * sizeof(a->id_off[0]));
}

int cache_add_alloc(struct cache *c, const char *name, const struct alloc *a)
{
	/* A bind's record is most often there already, from the ledger it wrote: the block stays shared. */
	const struct alloc_rec *r = NULL;
	owner_slot *sl = owners_find(&c->owners, a->uid, &r);
	if (sl && !strcmp(slot_src(&c->owners, *sl)->name, name) && rec_is(r, a))
		return 0;
	cache_remove_alloc(c, a->uid, NULL);
	struct node_src *s = src_get(c, name, true);
	if (!s || src_reserve(s, (s->block ? s->block->len : 0) + alloc_rec_size(a, NULL)) ||
	    owners_put(&c->owners, a->uid, s))
		return -1;
	src_append(s, a);
	src_touch(c, s);
	return 0;
}

int cache_share_allocs(struct cache *c, const char *name, struct alloc_block *b, int n)
{
	struct node_src *s = src_get(c, name, n > 0);
	if (!s)
		return n > 0 ? -1 : 0;
	src_clear(c, s);
	int rc = 0;
	if (n > 0) {
		/*
		 * The node's ledger, exactly: a pod that two racing binds reserved on
		 * two nodes keeps both records until the loser releases its own, so
		 * that the GPUs the ledgers hold never look free. (Out of memory for
		 * the index, a record still counts; only its lookup by uid fails.)
		 */
		s->block = block_hold(b);
		s->nallocs = n;
		const struct alloc_rec *r = src_recs(s);
		for (int i = 0; i < n; i++, r = alloc_rec_next(r))
			if (owners_put(&c->owners, alloc_rec_uid(r), s))
				rc = -1;
	}
	s->gen[CACHE_ALLOCS] = c->gen[CACHE_ALLOCS];
	src_touch(c, s);
	src_maybe_drop(c, s);
	return rc;
}

int cache_set_allocs(struct cache *c, const char *name, const struct alloc *a, int n)
{
	/* Exactly their size: most nodes hold a few pods, for long. */
	size_t need = 0;
	for (int i = 0; i < n; i++)
		need += alloc_rec_size(&a[i], NULL);
	struct alloc_block *b = n > 0 ? alloc_block_new(need) : NULL;
	if (n > 0 && !b)
		return -1;
	for (int i = 0; i < n; i++)
		alloc_block_append(b, &a[i], NULL, 0);
	int rc = cache_share_allocs(c, name, b, n);
	block_release(b);
	return rc;
}

int cache_assume(struct cache *c, const char *node, const struct alloc *a)
{
	struct node_src *s = keyset_get(&c->srcs, node);
	if (!s || allocs_reserve(&s->assumed, &s->assumed_cap, s->nassumed + 1))
		return -1;
	s->assumed[s->nassumed++] = *a;
	src_touch(c, s);
	return 0;
}

void cache_forget(struct cache *c, const char *uid, const char *node)
{
	struct node_src *s = keyset_get(&c->srcs, node);
	for (int i = 0; s && i < s->nassumed; i++) {
		if (!strcmp(s->assumed[i].uid, uid)) {
			s->assumed[i] = s->assumed[--s->nassumed];
			src_touch(c, s);
			return;
		}
	}
}

bool cache_find_alloc(struct cache *c, const char *uid, struct alloc *out, char *node, size_t size)
{
	const struct alloc_rec *r = NULL;
	owner_slot *sl = owners_find(&c->owners, uid, &r);
	if (!sl)
		return false;
	alloc_rec_unpack(r, out);
	snprintf(node, size, "%s", slot_src(&c->owners, *sl)->name);
	return true;
}

const struct gpu_node *cache_peek(struct cache *c, const char *name)
{
	struct node_src *s = keyset_get(&c->srcs, name);
	if (!s || !src_visible(s))
		return NULL;
	struct cache_node *v = src_view(c, s);
	return v ? v->node : NULL;
}

struct gpu_node *cache_clone_devices(struct cache *c, const char *name)
{
	cache_lock(c);
	struct node_src *s = keyset_get(&c->srcs, name);
	bool built = false;
	const struct gpu_node *g = s ? src_gns(s, &built) : NULL;
	struct gpu_node *n = g ? gpu_node_clone(g) : NULL;
	for (int i = 0; n && built && i < n->ndev; i++)
		gpu_clear_usage(&n->dev[i]);
	for (int i = 0; n && s->labels && i < s->labels->n; i++) {
		const struct label *l = &s->labels->labels[i];
		if (gpu_node_set_label(n, l->key, gpu_label_value_on(l, s->name))) {
			gpu_node_free(n);
			n = NULL;
		}
	}
	cache_unlock(c);
	return n;
}

void cache_relist_begin(struct cache *c, enum cache_kind k)
{
	if (k == CACHE_GPUCLAIMS) {
		pthread_rwlock_wrlock(&c->claims_lock);
		c->gen[k]++;
		pthread_rwlock_unlock(&c->claims_lock);
		return;
	}
	c->gen[k]++;
}

/* Drops kind k's data of s when it was not set in this relist; returns whether it did. */
static bool sweep_src(struct cache *c, struct node_src *s, enum cache_kind k)
{
	if (s->gen[k] == c->gen[k])
		return false;
	if (k == CACHE_NODES && s->labels) {
		block_release(s->labels);
		s->labels = NULL;
	} else if (k == CACHE_GPUS && s->info) {
		src_set_gpus(s, NULL);
	} else if (k == CACHE_ALLOCS && s->nallocs) {
		src_clear(c, s);
	} else {
		return false;
	}
	src_touch(c, s);
	return true;
}

static void sweep_claims(struct cache *c)
{
	pthread_rwlock_wrlock(&c->claims_lock);
	const char *key;
	void *val;
	for (size_t pos = 0; strmap_next(&c->claims, &pos, &key, &val);) {
		struct claim_entry *e = val;
		if (e->gen == c->gen[CACHE_GPUCLAIMS])
			continue;
		strmap_del(&c->claims, key);
		cJSON_Delete(e->obj);
		free(e);
	}
	pthread_rwlock_unlock(&c->claims_lock);
}

void cache_relist_sweep(struct cache *c, enum cache_kind k)
{
	if (k == CACHE_GPUCLAIMS) {
		sweep_claims(c);
		return;
	}
	struct node_src *s;
	for (size_t pos = 0; (s = keyset_next(&c->srcs, &pos));)
		if (sweep_src(c, s, k))
			src_maybe_drop(c, s);
}

/* ---- GpuClaims ----------------------------------------------------------- */

static void claim_key(char *out, size_t size, const char *ns, const char *name)
{
	snprintf(out, size, "%s/%s", ns, name);
}

int cache_set_gpuclaim(struct cache *c, const char *ns, const char *name, cJSON *obj)
{
	char key[512];
	claim_key(key, sizeof(key), ns, name);
	struct claim_entry *e = NULL;
	if (obj && !(e = malloc(sizeof(*e)))) {
		cJSON_Delete(obj);
		return -1;
	}
	void *old = NULL;
	int rc = 0;
	pthread_rwlock_wrlock(&c->claims_lock);
	if (e) {
		e->obj = obj;
		e->gen = c->gen[CACHE_GPUCLAIMS];
		rc = strmap_put(&c->claims, key, e, &old);
	} else {
		old = strmap_del(&c->claims, key);
	}
	pthread_rwlock_unlock(&c->claims_lock);
	if (old) {
		cJSON_Delete(((struct claim_entry *)old)->obj);
		free(old);
	}
	if (rc) {
		cJSON_Delete(obj);
		free(e);
	}
	return rc;
}

const cJSON *cache_gpuclaim_lookup(void *cache, const char *ns, const char *name)
{
	struct cache *c = cache;
	char key[512];
	claim_key(key, sizeof(key), ns, name);
	struct claim_entry *e = strmap_get(&c->claims, key);
	return e ? e->obj : NULL;
}

void cache_claims_rdlock(struct cache *c)
{
	pthread_rwlock_rdlock(&c->claims_lock);
}

void cache_claims_unlock(struct cache *c)
{
	pthread_rwlock_unlock(&c->claims_lock);
}

void cache_on_gained(struct cache *c, void (*fn)(void *ctx, const char *node), void *ctx)
{
	cache_lock(c);
	c->gained = fn;
	c->gained_ctx = ctx;
	cache_unlock(c);
}

void cache_stats(struct cache *c, struct cache_stats *out)
{
	memset(out, 0, sizeof(*out));
	struct snapshot *s = cache_acquire(c);
	out->nodes = s->n;
	out->version = s->version;
	for (size_t i = 0; i < s->n; i++) {
		out->devices += (size_t)snapshot_node(s, i)->node->ndev;
		out->allocs += (size_t)snapshot_node(s, i)->nallocs;
	}
	snapshot_release(s);
	pthread_rwlock_rdlock(&c->claims_lock);
	out->gpuclaims = c->claims.len;
	pthread_rwlock_unlock(&c->claims_lock);
}
