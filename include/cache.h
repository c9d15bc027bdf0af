/*
 * cache: node -> GPU capacity, as immutable snapshots.
 *
 * Writers (the inventory loader, reflectors, binds) change the source state
 * under the cache's writer lock: cache_lock(), any number of cache_set_* /
 * cache_*_alloc calls, cache_unlock(). Unlocking publishes one new snapshot
 * in which only the changed nodes were rebuilt.
 *
 * Readers (request handlers) call cache_acquire() to get the current
 * snapshot and snapshot_release() when done. Acquiring takes a lock for a
 * pointer load and a reference count increment only; a reader never blocks
 * writers for longer than that, and a writer never changes a published
 * snapshot or node view. See docs/architecture.md.
 */
#ifndef GPU_CACHE_H
#define GPU_CACHE_H

#include "claim.h"
#include "fit.h"
#include "gpu.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdint.h>

/*
 * How far apart the device ids of one allocation may lie. They are kept as
 * two-byte offsets from the lowest (an allocation is a node's, and a cluster
 * keeps hundreds of thousands): the agent numbers a node's GPUs from 0, 100
 * more for each vendor after the first, and MIG instances 1000 apart per
 * GPU, so a node's ids span at most about 65,000.
 */
#define ALLOC_ID_SPAN 65535

/* One pod's reservation of devices on one node. */
struct alloc {
	char uid[64];
	char pod[64];              /* "namespace/name", for display: cut at 63 bytes (the ledger has it whole) */
	enum claim_mode mode;
	uint32_t mem_mib;          /* shared: per device */
	uint32_t core;             /* shared: milli-GPU per device */
	uint32_t token;            /* the try of the bind that reserved it (ledger "try"); 0: none recorded */
	int64_t since;             /* unix seconds when reserved */
	int32_t id_base;           /* the lowest device id */
	uint16_t ndev;
	uint16_t id_off[GPU_MAX_DEVICES];   /* each device's id - id_base, in the allocation's order */
};

/* Device k's id. */
static inline int alloc_id(const struct alloc *a, int k)
{
	return a->id_base + a->id_off[k];
}
/* Adds the next device; -1 (nothing added) when a has GPU_MAX_DEVICES or the ids would span more than ALLOC_ID_SPAN. */
int alloc_add_id(struct alloc *a, int id);
/* Sets a->pod from the pod's namespace and name ("namespace/name"; the name alone when namespace is ""). */
void alloc_set_pod(struct alloc *a, const char *ns, const char *name);
/* "0,1" of a's ids. */
void alloc_ids(const struct alloc *a, char *out, size_t size);
/* Adds / removes a's usage on the devices of n (ids n lacks are skipped). */
void alloc_apply(struct gpu_node *n, const struct alloc *a);
void alloc_unapply(struct gpu_node *n, const struct alloc *a);

/*
 * An allocation as the cache keeps it, packed: its ids and strings only as
 * long as they are (about 90 bytes for a one-GPU pod; a struct alloc takes
 * 288, and a cluster holds hundreds of thousands). Its strings: the pod's
 * uid, namespace and name, and for a ledger's entry its GpuClaim and gang
 * (ledger.h), so that the reservation module keeps a ledger in the very
 * block the cache shows (cache_share_allocs). A node's records lie one
 * after another: alloc_rec_next() steps to the next.
 */
struct alloc_rec {
	uint16_t size;             /* bytes to the next record: a multiple of 8 */
	uint8_t mode;              /* enum claim_mode */
	uint8_t ndev;
	uint32_t mem_mib;
	uint32_t core;
	int32_t id_base;
	int64_t since;
	int32_t gang_timeout_s;    /* a ledger's gang place: how long it is kept; else 0 */
	uint32_t token;            /* struct alloc's */
	uint16_t id_off[];         /* ndev offsets; then uid, namespace, name, claim, gang, each NUL-terminated */
};

static inline const struct alloc_rec *alloc_rec_next(const struct alloc_rec *r)
{
	return (const struct alloc_rec *)((const char *)r + r->size);
}
static inline const char *alloc_rec_uid(const struct alloc_rec *r)
{
	return (const char *)(r->id_off + r->ndev);
}
/* A record's strings but the uid: those of a ledger entry; for others, claim and gang are "". */
struct alloc_names {
	const char *ns, *name, *claim, *gang;
};
/* r's strings, where they lie. */
void alloc_rec_names(const struct alloc_rec *r, struct alloc_names *out);
/* Bytes a takes packed, with names x (NULL: the namespace and name of a->pod, no claim or gang). */
size_t alloc_rec_size(const struct alloc *a, const struct alloc_names *x);
/* Packs a and x into out, which has alloc_rec_size(a, x) bytes, 8-byte aligned. */
void alloc_rec_pack(const struct alloc *a, const struct alloc_names *x, int32_t gang_timeout_s,
		    struct alloc_rec *out);
void alloc_rec_unpack(const struct alloc_rec *r, struct alloc *out);

/*
 * A node's records in one block with a reference count. Immutable once
 * shared: the cache's writer side, its views and the reservation module's
 * kept ledger of the node may all hold it; a writer copies it before a
 * change while another holds it.
 */
struct alloc_block {
	atomic_int refs;           /* first: the cache's block_hold, block_release */
	size_t len, cap;           /* bytes used, bytes of room */
	uint64_t data[];           /* the records, 8-byte aligned */
};
/* An empty block with room for cap bytes of records; NULL when out of memory. */
struct alloc_block *alloc_block_new(size_t cap);
void alloc_block_release(struct alloc_block *b);
static inline const struct alloc_rec *alloc_block_recs(const struct alloc_block *b)
{
	return (const struct alloc_rec *)b->data;
}
/* Appends a's record (see alloc_rec_pack); -1 when there is no room. */
int alloc_block_append(struct alloc_block *b, const struct alloc *a, const struct alloc_names *x,
		       int32_t gang_timeout_s);

/*
 * A node as readers see it: devices with their usage, and who uses them.
 * Immutable; laid out by the cache in two blocks (hot and cold): never free
 * its parts.
 */
struct cache_node {
	atomic_int refs;
	bool has_node;             /* a Node object was seen */
	bool has_gns;              /* a GpuNodeStatus was seen */
	struct fit_whole whole;    /* fit_whole_count(node): in the line a request reads first */
	uint16_t nassumed;         /* of the nallocs records, the last ones are binds in flight (cache_assume),
	                              not the ledger's */
	int nallocs;
	struct gpu_state_digest state;   /* gpu_node_state_digest(node) */
	struct gpu_node *node;     /* labels, devices, islands, usage */
	const struct alloc_rec *allocs;   /* nallocs records (alloc_rec_next) */
	uint64_t uid_bits;         /* cache_uid_bits() of each record's pod, or'ed: see cache_node_may_hold */
	void *info;                /* the devices' strings: shared with the node's writer side */
	void *labels;              /* the Node's labels: shared with the node's writer side */
	void *block;               /* allocs, when shared with the node's writer side; else allocs are
	                              the view's own (the cold block: binds in flight added), or NULL */
	struct slab *slab;         /* where this (hot) block came from */
	uint16_t hot_size;         /* (64 devices, 32 islands and a name: under 5 KiB) */
	uint16_t fit_size;         /* the hot block's first bytes, which a fit reads: all but the name */
	uint32_t id;               /* this view's own among the cache's views: reused only after 2^32 more */
};

/*
 * Four bits of 64 for a pod uid. A view ors those of its records' pods, so
 * that a request asking whether its pod holds something on a node (a bind
 * retried: its own reservation must not count against it) reads the
 * node's first line instead of its records; on a busy cluster it asks
 * that of every full node. No false "no"; a false "maybe" for about one
 * uid in 40 at 8 records.
 */
uint64_t cache_uid_bits(const char *uid);

static inline bool cache_node_may_hold(const struct cache_node *v, uint64_t uid_bits)
{
	return (v->uid_bits & uid_bits) == uid_bits;
}

/* Asks the CPU to fetch what a fit reads of a view, ahead of reading it. */
static inline void cache_node_prefetch(const struct cache_node *v)
{
	for (size_t off = 0; off < v->fit_size; off += 64)
		__builtin_prefetch((const char *)v + off);
}

/*
 * A snapshot's name index: each node's name and hash, and its position.
 * Snapshots published while no node comes or goes share one (a publish
 * keeps every node's position).
 */
struct snapshot_slot {
	size_t hash;
	const char *name;          /* in the index's names; NULL: empty slot */
	size_t pos;
};
struct snapshot_index {
	atomic_int refs;
	size_t cap;                /* power of two */
	char *names;
	struct snapshot_slot slot[];
};

/*
 * SNAPSHOT_CHUNK nodes of a snapshot, shared by the snapshots in which none
 * of them changed: a publish copies the chunks of the nodes that changed,
 * not a pointer and a reference for every node.
 */
#define SNAPSHOT_CHUNK 64
struct snapshot_chunk {
	atomic_int refs;
	struct cache_node *node[SNAPSHOT_CHUNK];   /* a reference on each; NULL past the last node */
};

struct snapshot {
	atomic_int refs;
	uint64_t version;          /* increases with every publish */
	size_t n;                  /* nodes, unordered: snapshot_node(s, 0 .. n-1) */
	struct snapshot_chunk **chunks;
	struct snapshot_index *index;
};

static inline struct cache_node *snapshot_node(const struct snapshot *s, size_t i)
{
	return s->chunks[i / SNAPSHOT_CHUNK]->node[i % SNAPSHOT_CHUNK];
}

struct cache;

struct cache *cache_new(void);
/* Frees the cache; no snapshot of it may still be held. */
void cache_free(struct cache *c);

/* ---- readers ---- */
struct snapshot *cache_acquire(struct cache *c);
void snapshot_release(struct snapshot *s);
const struct cache_node *snapshot_find(const struct snapshot *s, const char *name);
/*
 * snapshot_find() for each of n names into out[] (NULL where unknown), with
 * the memory each lookup needs fetched ahead of it: a request looks up
 * thousands of nodes, and one at a time they wait on memory.
 */
void snapshot_find_all(const struct snapshot *s, const char *const *names, int n,
		       const struct cache_node **out);

/* ---- writers: call between cache_lock() and cache_unlock() ---- */
void cache_lock(struct cache *c);
void cache_unlock(struct cache *c);

/* Labels (and name) from a Node object; takes ownership of n. NULL n deletes. */
int cache_set_node(struct cache *c, const char *name, struct gpu_node *n);
/*
 * Devices and islands from a GpuNodeStatus; takes ownership. NULL deletes.
 * Their usage is left out: the allocations give it.
 */
int cache_set_gpus(struct cache *c, const char *name, struct gpu_node *devices);
/*
 * Replaces every allocation on a node with its reservation ledger's, as is:
 * a pod may have records on two nodes while two binds of it race.
 */
int cache_set_allocs(struct cache *c, const char *name, const struct alloc *a, int n);
/*
 * The same with the n records of block b, which the node then shares
 * (a reference taken; b must not change after): the reservation module
 * keeps each node's ledger in one such block, and the cache needs no copy.
 */
int cache_share_allocs(struct cache *c, const char *name, struct alloc_block *b, int n);
/*
 * Adds one allocation (replacing an earlier one of the same pod uid,
 * wherever; nothing changes when the node has that very allocation).
 */
int cache_add_alloc(struct cache *c, const char *name, const struct alloc *a);
/* Removes the pod's allocation on node (NULL: its newest one); true if there was one. */
bool cache_remove_alloc(struct cache *c, const char *uid, const char *node);
/*
 * A bind in flight: the allocation it is about to make on the node, which
 * filter and prioritize count until cache_forget (kube-scheduler sends the
 * next pods while the bind still waits on the API server, and would send
 * them to the same devices). Not a record of the pod: cache_find_alloc does
 * not see it, and a view leaves it out once the pod's own record is there.
 * -1 when the node is unknown or out of memory.
 */
int cache_assume(struct cache *c, const char *node, const struct alloc *a);
void cache_forget(struct cache *c, const char *uid, const char *node);
/* The pod's newest allocation (copied to *out) and its node; false if none. */
bool cache_find_alloc(struct cache *c, const char *uid, struct alloc *out, char *node, size_t size);
/*
 * The node's current view including unpublished changes, for decisions
 * taken under the writer lock (binds). Valid until cache_unlock().
 */
const struct gpu_node *cache_peek(struct cache *c, const char *name);
/*
 * A copy of the node's labels and devices with no usage recorded (for a
 * caller that applies allocations read elsewhere). NULL when the node has
 * no GpuNodeStatus. The caller frees it with gpu_node_free(). Takes the
 * writer lock itself: never call it between cache_lock() and cache_unlock().
 */
struct gpu_node *cache_clone_devices(struct cache *c, const char *name);
/*
 * Relists: what was set of one kind between cache_relist_begin() and
 * cache_relist_sweep() stays, the rest of that kind is removed. Each kind
 * has its own generation, so relists of different resources may overlap.
 */
enum cache_kind { CACHE_NODES, CACHE_GPUS, CACHE_ALLOCS, CACHE_GPUCLAIMS, CACHE_KINDS };
void cache_relist_begin(struct cache *c, enum cache_kind k);
void cache_relist_sweep(struct cache *c, enum cache_kind k);

/* GpuClaim objects by namespace/name; ownership of obj passes to the cache. NULL deletes. */
int cache_set_gpuclaim(struct cache *c, const char *ns, const char *name, cJSON *obj);
/*
 * The GpuClaim object, or NULL; an api_claim_lookup (include/api.h). The
 * object stays valid only between cache_claims_rdlock() and
 * cache_claims_unlock(): claims are read under a shared lock.
 */
const cJSON *cache_gpuclaim_lookup(void *cache, const char *ns, const char *name);
void cache_claims_rdlock(struct cache *c);
void cache_claims_unlock(struct cache *c);

/*
 * fn(ctx, node) for each node whose newly built view offers more than its
 * view before (gpu_node_gained: a reservation released, a device turned
 * healthy, a node's first GpuNodeStatus), as cache_unlock() publishes it.
 * It runs under the writer lock: it may only take note (no cache call, no
 * wait on anything but a short mutex). fn NULL: none. Set under the
 * writer lock: at any time.
 */
void cache_on_gained(struct cache *c, void (*fn)(void *ctx, const char *node), void *ctx);

struct cache_stats {
	size_t nodes, devices, allocs, gpuclaims;
	uint64_t version;
};
void cache_stats(struct cache *c, struct cache_stats *out);

#endif
