/*
 * keyset: records found by a string each one holds (a pod's uid in its
 * record, a node's name in its state), open addressing with linear probing.
 * A slot is the record's pointer and 2 bytes of its key's hash, 10 bytes:
 * the key is read from the record (key_of) when those bytes match, and the
 * hash computed again when the table grows. A map with a key pointer and a
 * whole hash beside each value took 24, and the largest clusters keep
 * 520,000 pods (a table of 2^20 slots). Records are the caller's. Not
 * thread-safe: the owner serialises access.
 */
#ifndef GPU_KEYSET_H
#define GPU_KEYSET_H

#include <stddef.h>
#include <stdint.h>

typedef const char *(*keyset_key_fn)(const void *record);

struct keyset {
	void **slot;          /* NULL: empty; else a record, or the deleted marker */
	uint16_t *tag;        /* each slot's hash bits, after slot[] in its block */
	size_t cap;           /* power of two, or 0 */
	size_t len;           /* records */
	size_t used;          /* records and deleted slots */
	unsigned rehashes;    /* times the records moved (a walk's positions went stale) */
	keyset_key_fn key_of;
};

void keyset_init(struct keyset *s, keyset_key_fn key_of);
/* Frees the table, not the records. */
void keyset_release(struct keyset *s);
void *keyset_get(const struct keyset *s, const char *key);
/* Inserts rec, or puts it in place of the record with its key (*old gets that one, or NULL). 0, or -1 (no memory). */
int keyset_put(struct keyset *s, void *rec, void **old);
/* Removes the record with that key; returns it, or NULL. */
void *keyset_del(struct keyset *s, const char *key);
/*
 * Iteration: for (size_t i = 0; (rec = keyset_next(s, &i));). keyset_del
 * may be called during an iteration, for any key: it leaves a marker and
 * moves no record, so none is skipped or seen twice. keyset_put may grow
 * the table, which moves them: a walk that lets others at the set between
 * two steps goes on only while `rehashes` is what it was.
 */
void *keyset_next(const struct keyset *s, size_t *pos);

#endif
