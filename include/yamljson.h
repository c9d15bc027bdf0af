/*
 * yamljson: reads a YAML or JSON document into a cJSON tree, so every file
 * format the project accepts (inventory, config) goes through one decoder.
 */
#ifndef GPU_YAMLJSON_H
#define GPU_YAMLJSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

/*
 * Parses text (len bytes) as JSON when it starts with '{' or '[', else as
 * YAML (the first document). Plain YAML scalars become numbers, booleans or
 * null when they look like them, unless quoted. Returns NULL with a message
 * in err on failure. The caller frees the tree with cJSON_Delete.
 */
cJSON *yamljson_parse(const char *text, size_t len, char *err, size_t errlen);

/* Reads a file of at most max_bytes and parses it as above. */
cJSON *yamljson_load(const char *path, size_t max_bytes, char *err, size_t errlen);

#endif
