#include "yamljson.h"
#include "buf.h"
#include "strnum.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#define MAX_DEPTH 64

/* Turns a plain (unquoted) YAML scalar into the JSON value it means. */
static cJSON *plain_scalar(const char *s)
{
	if (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL"))
		return cJSON_CreateNull();
	if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
		return cJSON_CreateTrue();
	if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
		return cJSON_CreateFalse();
	double d;
	/* Numbers only in plain decimal form: "0x1F", "1e3" or "08" stay strings. */
	bool numeric = isdigit((unsigned char)s[s[0] == '-']) && !strpbrk(s, "xXeE_:") &&
		       !(s[s[0] == '-'] == '0' && isdigit((unsigned char)s[1 + (s[0] == '-')]));
	if (numeric && strnum_double(s, &d))
		return cJSON_CreateNumber(d);
	return cJSON_CreateString(s);
}

static cJSON *node_to_json(yaml_document_t *doc, yaml_node_t *node, int depth, char *err, size_t errlen)
{
	if (depth > MAX_DEPTH) {
		snprintf(err, errlen, "YAML nested deeper than %d levels", MAX_DEPTH);
		return NULL;
	}
	switch (node->type) {
	case YAML_SCALAR_NODE: {
		const char *v = (const char *)node->data.scalar.value;
		if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
			return plain_scalar(v);
		return cJSON_CreateString(v);
	}
	case YAML_SEQUENCE_NODE: {
		cJSON *arr = cJSON_CreateArray();
		for (yaml_node_item_t *it = node->data.sequence.items.start;
		     arr && it < node->data.sequence.items.top; it++) {
			cJSON *v = node_to_json(doc, yaml_document_get_node(doc, *it), depth + 1, err, errlen);
			if (!v) {
				cJSON_Delete(arr);
				return NULL;
			}
			cJSON_AddItemToArray(arr, v);
		}
		return arr;
	}
	case YAML_MAPPING_NODE: {
		cJSON *obj = cJSON_CreateObject();
		for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
		     obj && p < node->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(doc, p->key);
			if (!k || k->type != YAML_SCALAR_NODE) {
				snprintf(err, errlen, "YAML mapping key at line %zu is not a scalar",
					 k ? k->start_mark.line + 1 : 0);
				cJSON_Delete(obj);
				return NULL;
			}
			cJSON *v = node_to_json(doc, yaml_document_get_node(doc, p->value), depth + 1, err, errlen);
			if (!v) {
				cJSON_Delete(obj);
				return NULL;
			}
			cJSON_AddItemToObject(obj, (const char *)k->data.scalar.value, v);
		}
		return obj;
	}
	default:
		snprintf(err, errlen, "empty YAML node");
		return NULL;
	}
}

static cJSON *parse_yaml(const char *text, size_t len, char *err, size_t errlen)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	if (!yaml_parser_initialize(&parser)) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(err, errlen, "YAML error at line %zu: %s", parser.problem_mark.line + 1,
			 parser.problem ? parser.problem : "unknown");
		yaml_parser_delete(&parser);
		return NULL;
	}
	cJSON *out = NULL;
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	if (!root)
		snprintf(err, errlen, "empty YAML document");
	else
		out = node_to_json(&doc, root, 0, err, errlen);
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	return out;
}

cJSON *yamljson_parse(const char *text, size_t len, char *err, size_t errlen)
{
	size_t i = 0;
	while (i < len && isspace((unsigned char)text[i]))
		i++;
	if (i < len && (text[i] == '{' || text[i] == '[')) {
		const char *end = NULL;
		cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
		if (!j) {
			size_t at = end ? (size_t)(end - text) : 0, line = 1, col = 1;
			for (size_t k = 0; k < at && k < len; k++, col++)
				if (text[k] == '\n')
					line++, col = 0;
			snprintf(err, errlen, "invalid JSON at line %zu, column %zu (byte %zu)", line, col, at);
			return NULL;
		}
		return j;
	}
	return parse_yaml(text, len, err, errlen);
}

cJSON *yamljson_load(const char *path, size_t max_bytes, char *err, size_t errlen)
{
	struct buf b;
	buf_init(&b, max_bytes);
	cJSON *out = NULL;
	if (buf_read_file(&b, path, err, errlen) == 0)
		out = yamljson_parse(buf_cstr(&b), b.len, err, errlen);
	buf_release(&b);
	if (!out && err[0] && strncmp(err, path, strlen(path))) {
		char tmp[256];
		snprintf(tmp, sizeof(tmp), "%s: %s", path, err);
		snprintf(err, errlen, "%s", tmp);
	}
	return out;
}
