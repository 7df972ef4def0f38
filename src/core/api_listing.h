/* The public API as data: tables that tools/apigen.c generates from the
 * public headers at build time (offsets, sizes and values computed by the
 * compiler), printed as JSON by loom_api_describe. */
#ifndef LOOM_CORE_API_LISTING_H
#define LOOM_CORE_API_LISTING_H

#include <stddef.h>

typedef struct api_function {
  const char *name, *header;
  const char *decl; /* its declaration, LOOM_API left out */
} api_function_t;

typedef struct api_field {
  const char *name;
  const char *type; /* the C type of one element: "int64_t", "const char *" */
  size_t offset, size;
  size_t count; /* elements: 1, or an array's length */
} api_field_t;

typedef struct api_struct {
  const char *name, *header;
  size_t size, align;
  const api_field_t *fields;
  size_t n_fields;
} api_struct_t;

typedef struct api_enum_value {
  const char *name;
  long long value;
} api_enum_value_t;

typedef struct api_enum {
  const char *name, *header;
  size_t size;
  const api_enum_value_t *values;
  size_t n_values;
} api_enum_t;

typedef struct api_typedef {
  const char *name, *header;
  const char *decl; /* "int64_t loom_dim_t", "struct loom_graph loom_graph_t" */
  size_t size;      /* 0: an opaque handle's struct */
} api_typedef_t;

typedef struct api_constant {
  const char *name;
  long long value;
} api_constant_t;

/* Each table ends with an entry whose name is NULL. */
extern const api_function_t api_functions[];
extern const api_struct_t api_structs[];
extern const api_enum_t api_enums[];
extern const api_typedef_t api_typedefs[];
extern const api_constant_t api_constants[];

#endif
