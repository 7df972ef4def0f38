/* loom_api_describe: the generated tables of the public API (api_listing.h)
 * as JSON, for bindings. */
#include "core/api_listing.h"

#include "core/status.h"
#include "core/text.h"

/* s as a JSON string (the headers' text holds no control characters). */
static void put_string(core_text_t *t, const char *s) {
  core_text_put(t, "\"");
  for (; *s; s++) core_text_put(t, *s == '"' || *s == '\\' ? "\\%c" : "%c", *s);
  core_text_put(t, "\"");
}

static void put_functions(core_text_t *t) {
  core_text_put(t, "  \"functions\": [");
  for (const api_function_t *f = api_functions; f->name; f++) {
    core_text_put(t, "%s\n    {\"name\": \"%s\", \"header\": \"%s\", \"decl\": ",
                  f == api_functions ? "" : ",", f->name, f->header);
    put_string(t, f->decl);
    core_text_put(t, "}");
  }
  core_text_put(t, "\n  ],\n");
}

static void put_fields(core_text_t *t, const api_struct_t *s) {
  for (size_t i = 0; i < s->n_fields; i++) {
    const api_field_t *f = &s->fields[i];
    core_text_put(t, "%s\n        {\"name\": \"%s\", \"type\": ", i ? "," : "", f->name);
    put_string(t, f->type);
    core_text_put(t, ", \"offset\": %zu, \"size\": %zu, \"count\": %zu}", f->offset, f->size,
                  f->count);
  }
}

static void put_structs(core_text_t *t) {
  core_text_put(t, "  \"structs\": [");
  for (const api_struct_t *s = api_structs; s->name; s++) {
    core_text_put(t, "%s\n    {\"name\": \"%s\", \"header\": \"%s\", \"size\": %zu, "
                  "\"align\": %zu, \"fields\": [", s == api_structs ? "" : ",", s->name,
                  s->header, s->size, s->align);
    put_fields(t, s);
    core_text_put(t, "]}");
  }
  core_text_put(t, "\n  ],\n");
}

static void put_enums(core_text_t *t) {
  core_text_put(t, "  \"enums\": [");
  for (const api_enum_t *e = api_enums; e->name; e++) {
    core_text_put(t, "%s\n    {\"name\": \"%s\", \"header\": \"%s\", \"size\": %zu, \"values\": [",
                  e == api_enums ? "" : ",", e->name, e->header, e->size);
    for (size_t i = 0; i < e->n_values; i++)
      core_text_put(t, "%s{\"name\": \"%s\", \"value\": %lld}", i ? ", " : "",
                    e->values[i].name, e->values[i].value);
    core_text_put(t, "]}");
  }
  core_text_put(t, "\n  ],\n");
}

static void put_typedefs(core_text_t *t) {
  core_text_put(t, "  \"typedefs\": [");
  for (const api_typedef_t *d = api_typedefs; d->name; d++) {
    core_text_put(t, "%s\n    {\"name\": \"%s\", \"header\": \"%s\", \"decl\": ",
                  d == api_typedefs ? "" : ",", d->name, d->header);
    put_string(t, d->decl);
    core_text_put(t, ", \"size\": %zu}", d->size);
  }
  core_text_put(t, "\n  ],\n");
}

static void put_constants(core_text_t *t) {
  core_text_put(t, "  \"constants\": [");
  for (const api_constant_t *c = api_constants; c->name; c++)
    core_text_put(t, "%s\n    {\"name\": \"%s\", \"value\": %lld}",
                  c == api_constants ? "" : ",", c->name, c->value);
  core_text_put(t, "\n  ]\n");
}

loom_status_t loom_api_describe(char **out) {
  LOOM_CHECK_ARG(out);
  core_text_t t = {0};
  core_text_put(&t, "{\n");
  put_functions(&t);
  put_structs(&t);
  put_enums(&t);
  put_typedefs(&t);
  put_constants(&t);
  core_text_put(&t, "}\n");
  return core_text_take(&t, "loom_api_describe", out);
}
