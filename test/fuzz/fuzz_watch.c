/*
 * libFuzzer target: a watch stream as the API server sends it, one JSON
 * event per line, through the client's stream parser
 * (kube_watch_parser_feed, what kube_watch runs on each read) and on into
 * the cluster-mode sinks that write the cache, as the reflector does.
 *
 * Input: byte 0 seeds where the stream is cut into reads (anywhere, down
 * to single bytes) and the event size cap (256 B .. 32 KiB, so the
 * overflow path is reachable); the rest is the stream. The stream is fed
 * twice: whole, with every event applied to an empty cache, and cut into
 * reads. Both must see the same events in the same order and end the same
 * way: where the reads fall must not matter. The cache is emptied after
 * each input, so a crash reproduces from its input.
 */
#include "fuzz.h"

#include "api.h"
#include "cluster.h"
#include "kube.h"
#include "ledger.h"

#include <stdbool.h>

struct seen {
	uint64_t hash;            /* of the events' text, in order */
	int n;
	struct cache *cache;      /* NULL: only record */
};

static uint64_t fnv(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* What the reflector does with an event, with the sink chosen by the object's kind. */
static void apply(struct seen *s, const cJSON *ev)
{
	const char *type = api_str(ev, "type");
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(ev, "object");
	if (!type || !cJSON_IsObject(obj))
		return;
	bool deleted = !strcmp(type, "DELETED");
	if (!deleted && strcmp(type, "ADDED") && strcmp(type, "MODIFIED"))
		return;   /* BOOKMARK and ERROR only move the reflector's state */
	const char *kind = api_str(obj, "kind");
	struct reflector_sink sink;
	if (kind && !strcmp(kind, "Node")) {
		cluster_node_sink(s->cache, &sink);
	} else if (kind && !strcmp(kind, "GpuNodeStatus")) {
		cluster_gns_sink(s->cache, &sink);
	} else if (kind && !strcmp(kind, "GpuClaim")) {
		cluster_gpuclaim_sink(s->cache, &sink);
	} else {
		struct ledger l;
		char err[256];
		if (!ledger_decode(obj, &l, err, sizeof(err)))
			ledger_release(&l);
		return;
	}
	sink.lock(sink.ctx);
	sink.apply(sink.ctx, deleted, obj);
	sink.unlock(sink.ctx);
}

static int on_event(void *ctx, const cJSON *ev)
{
	struct seen *s = ctx;
	char *text = cJSON_PrintUnformatted(ev);
	if (!text)
		abort();
	s->hash = fnv(s->hash ^ (uint64_t)s->n, text);
	s->n++;
	free(text);
	if (s->cache)
		apply(s, ev);
	/* An ERROR event ends a watch (the reflector relists or backs off). */
	const char *type = api_str(ev, "type");
	return type && !strcmp(type, "ERROR");
}

/* After each read: what a request would see now. */
static void on_flush(void *ctx)
{
	struct seen *s = ctx;
	if (s->cache)
		snapshot_release(cache_acquire(s->cache));
}

/*
 * Drops everything, as a relist that finds nothing does: the next input
 * starts from an empty cache (a new one per input would spend most of the
 * time mapping the cache's first slab chunk).
 */
static void empty(struct cache *c)
{
	static const enum cache_kind kinds[] = { CACHE_NODES, CACHE_GPUS, CACHE_ALLOCS };
	cache_lock(c);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		cache_relist_begin(c, kinds[i]);
		cache_relist_sweep(c, kinds[i]);
	}
	cache_unlock(c);
	cache_relist_begin(c, CACHE_GPUCLAIMS);
	cache_relist_sweep(c, CACHE_GPUCLAIMS);
	struct cache_stats st;
	cache_stats(c, &st);
	if (st.nodes || st.gpuclaims)
		abort();   /* the sweep left something */
}

/* Feeds the stream in reads cut by the seed; returns how the parser ended. */
static int feed(struct kube_watch_parser *p, const char *data, size_t len, uint32_t seed)
{
	size_t off = 0;
	while (off < len) {
		size_t n = len - off;
		if (seed) {
			seed ^= seed << 13;
			seed ^= seed >> 17;
			seed ^= seed << 5;
			size_t want = seed & 0x100 ? 1 + (seed >> 9) % 4096 : 1 + (seed >> 9) % 16;
			n = want < n ? want : n;
		}
		if (kube_watch_parser_feed(p, data + off, n))
			return -1;
		off += n;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	if (!quiet) {
		fuzz_quiet();
		quiet = true;
	}
	if (size < 1)
		return 0;
	size_t cap = (size_t)256 << (data[0] & 7);
	const char *stream = (const char *)data + 1;
	size_t len = size - 1;

	static struct cache *cache;
	if (!cache && !(cache = cache_new()))
		abort();
	struct seen whole = { .hash = 0xcbf29ce484222325ull, .cache = cache };
	struct kube_watch_ops ops = { .event = on_event, .flush = on_flush, .ctx = &whole };
	struct kube_watch_parser p;
	kube_watch_parser_init(&p, &ops, cap);
	int end_whole = feed(&p, stream, len, 0);
	bool overflow_whole = p.overflow;
	kube_watch_parser_release(&p);
	empty(cache);

	struct seen cut = { .hash = 0xcbf29ce484222325ull };
	ops.ctx = &cut;
	kube_watch_parser_init(&p, &ops, cap);
	int end_cut = feed(&p, stream, len, 0x9e3779b9u * (data[0] + 1u));
	bool overflow_cut = p.overflow;
	kube_watch_parser_release(&p);

	if (whole.n != cut.n || whole.hash != cut.hash || end_whole != end_cut || overflow_whole != overflow_cut) {
		fprintf(stderr, "whole: %d events, end %d, overflow %d; cut: %d events, end %d, overflow %d\n",
			whole.n, end_whole, overflow_whole, cut.n, end_cut, overflow_cut);
		abort();
	}
	return 0;
}
