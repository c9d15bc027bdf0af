/*
 * strmap: string -> pointer hash map (open addressing, linear probing).
 * Keys are copied; values are the caller's (records that hold their own
 * key: keyset.h). Not thread-safe: the owner serialises access (see each
 * user's locking comment).
 */
#ifndef GPU_STRMAP_H
#define GPU_STRMAP_H

#include <stddef.h>

struct strmap_slot {
	char *key;        /* NULL: empty; STRMAP_TOMB: deleted */
	void *value;
	size_t hash;
};

struct strmap {
	struct strmap_slot *slots;
	size_t cap;       /* power of two, or 0 */
	size_t len;
	size_t used;      /* live + deleted slots */
	unsigned rehashes;   /* times the entries moved (a walk's positions went stale) */
};

void strmap_init(struct strmap *m);
/* Frees the keys and the table, not the values. */
void strmap_release(struct strmap *m);
void *strmap_get(const struct strmap *m, const char *key);
/* Inserts or replaces; returns 0 or -1 (no memory). *old gets the replaced value or NULL. */
int strmap_put(struct strmap *m, const char *key, void *value, void **old);
/* Removes key; returns its value or NULL. */
void *strmap_del(struct strmap *m, const char *key);
size_t strmap_hash(const char *key);

/*
 * Iteration: for (size_t i = 0; strmap_next(m, &i, &k, &v);)
 * strmap_del may be called during an iteration, for any key: it leaves a
 * tombstone and moves no entry, so none is skipped or seen twice (k is
 * freed when k's own entry is deleted). strmap_put may rehash, which moves
 * them: a walk that lets others at the map between two steps goes on only
 * while `rehashes` is what it was.
 */
int strmap_next(const struct strmap *m, size_t *pos, const char **key, void **value);

#endif
