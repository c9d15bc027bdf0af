/*
 * jsonarena: lets cJSON allocate a request's whole tree from one arena.
 *
 * A filter request for 5000 nodes is about 10000 cJSON allocations; taking
 * them from a bump arena and dropping the arena at once instead of freeing
 * each node is most of the JSON cost on the hot path (bench/bench.c).
 *
 * jsonarena_install() routes cJSON's allocator through a thread-local
 * arena when one is active on the calling thread, and through malloc/free
 * otherwise, so code that does not opt in is unaffected.
 */
#ifndef GPU_JSONARENA_H
#define GPU_JSONARENA_H

#include <cjson/cJSON.h>
#include <stddef.h>

struct jsonarena {
	struct jsonarena_chunk *chunks;   /* newest first */
	size_t bytes;                     /* in use, for the cap */
	size_t cap;                       /* at most this many bytes; then malloc fails */
};

/* Once per process, before any thread uses cJSON. */
void jsonarena_install(void);

/* Makes a the calling thread's cJSON allocator until jsonarena_end(). */
void jsonarena_begin(struct jsonarena *a, size_t cap);
/* Stops using a and frees everything allocated from it (the cJSON trees too). */
void jsonarena_end(struct jsonarena *a);

/*
 * cJSON_Delete for trees that may come from the active arena: those are
 * left for jsonarena_end() (walking 10000 nodes to free nothing is waste).
 */
void jsonarena_delete(cJSON *tree);

#endif
