/* apigen: reads the public headers (the .h files of include/loom/) and writes a C file
 * of tables describing them (src/core/api_listing.h): every LOOM_API
 * function, struct, enum, typedef and integer constant. Offsets, sizes and
 * values are left to the compiler (offsetof, sizeof, the enumerators
 * themselves), so the listing that loom_api_describe prints cannot drift
 * from the headers; static assertions in the output fail the build when a
 * struct has a gap that a field the parser missed would fill.
 *
 * The headers are written in a plain subset of C, which this enforces: at
 * the top level only typedefs of structs, enums, scalars and function
 * pointers, LOOM_API function declarations and static inline helpers; in
 * structs only fields (no nested definitions). Anything else stops the
 * build with the file and line, so that a declaration cannot be left out
 * of the listing, or lack LOOM_API, unnoticed.
 *
 * usage: apigen OUT.c HEADER.h... */
#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 65536
#define MAX_TEXT 512

typedef struct token {
  char text[MAX_TEXT];
  int line;
} token_t;

typedef struct header {
  const char *path, *name; /* name: "loom.h" */
  token_t *tok;
  int n;
} header_t;

static FILE *out;
static const char *cur_path;

static void die(int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "apigen: %s:%d: ", cur_path, line);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) die(0, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) die(0, "cannot read %s", path);
  s[n] = 0;
  fclose(f);
  return s;
}

/* ---- Preprocessing: comments out, conditionals skipped, constants kept ---- */

typedef struct constant {
  char name[64];
} constant_t;
static constant_t constants[256];
static int n_constants;

/* An object-like macro of an integer expression: a constant for the
 * listing (not an include guard, an initializer or an attribute). */
static void note_define(const char *line) {
  char name[64], body[MAX_TEXT] = "";
  if (sscanf(line, " # define %63[A-Za-z0-9_]%511[^\n]", name, body) < 1) return;
  const char *after = strstr(line, name) + strlen(name);
  if (*after == '(' || n_constants == 256) return; /* function-like */
  bool any = false;
  for (const char *p = body; *p; p++) {
    if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789 ()+-*/<", *p)) return;
    any |= isdigit((unsigned char)*p) || isupper((unsigned char)*p);
  }
  if (any) snprintf(constants[n_constants++].name, 64, "%s", name);
}

/* Blanks comments in place, keeping line breaks (for line numbers). */
static void blank_comments(char *s) {
  for (char *p = s; *p; p++) {
    bool block = p[0] == '/' && p[1] == '*', line = p[0] == '/' && p[1] == '/';
    if (!block && !line) continue;
    char *end = block ? strstr(p + 2, "*/") : strchr(p, '\n');
    char *stop = !end ? p + strlen(p) : block ? end + 2 : end;
    for (; p < stop; p++)
      if (*p != '\n') *p = ' ';
    p--;
  }
}

typedef struct conditionals {
  int depth, skip_from; /* lines are skipped while depth >= skip_from > 0 */
  bool guard_seen;
} conditionals_t;

/* A preprocessor line: #if blocks other than the include guard are
 * skipped whole (they hold compiler-specific attributes and C++'s extern
 * "C" braces); a #define may be a constant. */
static void directive(const char *line, int n, conditionals_t *c) {
  char dir[16] = "";
  sscanf(line, " # %15[a-z]", dir);
  if (!strcmp(dir, "else") || !strcmp(dir, "elif") || line[strcspn(line, "\n") - 1] == '\\')
    die(n, "#else, #elif and continued lines are not for public headers");
  if (!strncmp(dir, "if", 2)) {
    bool guard = !c->guard_seen && !strcmp(dir, "ifndef");
    c->guard_seen = true;
    if (++c->depth && !guard && !c->skip_from) c->skip_from = c->depth;
  } else if (!strcmp(dir, "endif")) {
    if (c->skip_from == c->depth) c->skip_from = 0;
    c->depth--;
  } else if (!strcmp(dir, "define") && !c->skip_from) {
    note_define(line);
  }
}

/* Blanks comments, preprocessor lines and skipped blocks of s in place. */
static void strip(char *s) {
  blank_comments(s);
  conditionals_t c = {0};
  int n = 1;
  for (char *line = s; *line; n++) {
    char *end = line + strcspn(line, "\n");
    const char *q = line + strspn(line, " \t");
    bool is_directive = *q == '#';
    if (is_directive) directive(q, n, &c);
    if (is_directive || c.skip_from) memset(line, ' ', (size_t)(end - line));
    line = *end ? end + 1 : end;
  }
}

/* ---- Tokens ------------------------------------------------------------------- */

static void tokenize(const char *s, header_t *h) {
  h->tok = calloc(MAX_TOKENS, sizeof *h->tok);
  int line = 1;
  for (const char *p = s; *p;) {
    if (*p == '\n') line++;
    if (isspace((unsigned char)*p)) { p++; continue; }
    size_t len = 1;
    if (isalnum((unsigned char)*p) || *p == '_')
      while (isalnum((unsigned char)p[len]) || p[len] == '_') len++;
    else if (p[0] == '.' && p[1] == '.' && p[2] == '.')
      len = 3;
    else if (*p == '"')
      len += strcspn(p + 1, "\"") + (p[1 + strcspn(p + 1, "\"")] == '"');
    if (h->n == MAX_TOKENS || len >= MAX_TEXT) die(line, "too long");
    memcpy(h->tok[h->n].text, p, len);
    h->tok[h->n++].line = line;
    p += len;
  }
}

static bool is(const token_t *t, const char *text) { return !strcmp(t->text, text); }
static bool is_ident(const token_t *t) {
  return isalpha((unsigned char)t->text[0]) || t->text[0] == '_';
}

/* The index of the token closing the bracket at i. */
static int matching(const header_t *h, int i) {
  const char *open = h->tok[i].text, *close = is(&h->tok[i], "{") ? "}" : ")";
  for (int depth = 0; i < h->n; i++) {
    depth += is(&h->tok[i], open) - is(&h->tok[i], close);
    if (depth == 0) return i;
  }
  die(h->tok[h->n - 1].line, "unbalanced %s", open);
  return -1;
}

/* Whether C text puts a space between tokens prev and t: "const char *s",
 * "f(int a, int b)", "x[2]". */
static bool spaced(const char *prev, const char *t) {
  return !strchr(",)];[(", t[0]) && !strchr("([*", prev[0]);
}

/* Tokens [from, to) as C text. */
static void join(const header_t *h, int from, int to, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = from; i < to; i++) {
    bool space = i > from && spaced(h->tok[i - 1].text, h->tok[i].text);
    n += (size_t)snprintf(buf + n, n < size ? size - n : 0, "%s%s", space ? " " : "",
                          h->tok[i].text);
  }
  if (n >= size) die(h->tok[from].line, "declaration too long");
}

/* ---- Output --------------------------------------------------------------------- */

static void emit_string(const char *s) {
  fputc('"', out);
  for (; *s; s++) fprintf(out, *s == '"' || *s == '\\' ? "\\%c" : "%c", *s);
  fputc('"', out);
}

typedef struct field {
  char name[MAX_TEXT], ctype[2 * MAX_TEXT];
  bool array;
} field_t;

#define MAX_FIELDS 64

/* The end of the base type of a field statement at i: the first
 * declarator's stars or name. */
static int base_type_end(const header_t *h, int i, int end) {
  for (; i < end; i++) {
    const token_t *t = &h->tok[i];
    if (is(t, "*")) return i;
    if (is_ident(t) && (is(t + 1, ";") || is(t + 1, ",") || is(t + 1, "["))) return i;
  }
  return end;
}

/* The declarators [d, end) of a field statement of base type `base`
 * into f[*n...]. */
static void parse_declarators(const header_t *h, int d, int end, const char *base,
                              const char *type, field_t *f, int *n) {
  while (d < end) {
    int name = -1, e = d;
    for (; e < end && !is(&h->tok[e], ","); e++) {
      if (name < 0 && is_ident(&h->tok[e]) && !is(&h->tok[e], "const")) name = e;
    }
    if (name < 0) die(h->tok[d].line, "%s: a field without a name", type);
    if (*n == MAX_FIELDS) die(h->tok[d].line, "%s: too many fields", type);
    char stars[MAX_TEXT];
    join(h, d, name, stars, sizeof stars);
    field_t *x = &f[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", h->tok[name].text);
    snprintf(x->ctype, sizeof x->ctype, "%s%s%s", base, stars[0] ? " " : "", stars);
    x->array = is(&h->tok[name + 1], "[");
    d = e + 1;
  }
}

/* The fields between braces open and close of struct `type`. */
static int parse_fields(const header_t *h, int open, int close, const char *type, field_t *f) {
  int n = 0;
  for (int i = open + 1; i < close;) {
    int end = i;
    while (end < close && !is(&h->tok[end], ";")) end++;
    if (end == close) die(h->tok[i].line, "a field of %s lacks ';'", type);
    for (int k = i; k < end; k++)
      if (is(&h->tok[k], "(") || is(&h->tok[k], "{"))
        die(h->tok[k].line, "%s: a nested declaration, which the listing cannot describe", type);
    int b = base_type_end(h, i, end);
    char base[MAX_TEXT];
    join(h, i, b, base, sizeof base);
    parse_declarators(h, b, end, base, type, f, &n);
    i = end + 1;
  }
  return n;
}

/* The member expression of field f of type: "((T *)0)->f". */
#define MEMBER "(((%s *)0)->%s)"

static void emit_struct(const header_t *h, int open, int close, const char *type) {
  static field_t f[MAX_FIELDS];
  int n = parse_fields(h, open, close, type, f);
  fprintf(out, "static const api_field_t fields_%s[] = {\n", type);
  for (int i = 0; i < n; i++) {
    fprintf(out, "    {\"%s\", ", f[i].name);
    emit_string(f[i].ctype);
    fprintf(out, ", offsetof(%s, %s), sizeof" MEMBER ", ", type, f[i].name, type, f[i].name);
    if (f[i].array) fprintf(out, "sizeof" MEMBER " / sizeof" MEMBER "[0]},\n", type, f[i].name, type, f[i].name);
    else fprintf(out, "1},\n");
  }
  fprintf(out, "};\n");
  /* Each field starts where the one before ends, aligned: a larger gap
   * is room for a field the parser missed. */
  for (int i = 1; i < n; i++)
    fprintf(out, "_Static_assert(offsetof(%s, %s) == ALIGN_UP(offsetof(%s, %s) + sizeof" MEMBER
            ", __alignof__" MEMBER "), \"%s: a gap before %s: a field the listing lacks?\");\n",
            type, f[i].name, type, f[i - 1].name, type, f[i - 1].name, type, f[i].name, type,
            f[i].name);
  if (n)
    fprintf(out, "_Static_assert(sizeof(%s) == ALIGN_UP(offsetof(%s, %s) + sizeof" MEMBER
            ", __alignof__(%s)), \"%s: a gap at the end: a field the listing lacks?\");\n",
            type, type, f[n - 1].name, type, f[n - 1].name, type, type);
}

/* The listing's records, written at the end in their arrays. */
typedef struct record {
  char name[MAX_TEXT], header[MAX_TEXT], decl[2 * MAX_TEXT];
  int kind; /* RECORD_* */
  int first, last; /* enum: enumerator tokens; struct: brace tokens */
  const header_t *h;
} record_t;
enum { RECORD_FUNCTION, RECORD_STRUCT, RECORD_ENUM, RECORD_TYPEDEF, RECORD_OPAQUE };
static record_t records[2048];
static int n_records;

static record_t *add_record(int kind, const header_t *h, const char *name) {
  if (n_records == 2048) die(0, "too many declarations");
  record_t *r = &records[n_records++];
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->h = h;
  snprintf(r->name, sizeof r->name, "%s", name);
  snprintf(r->header, sizeof r->header, "%s", h->name);
  return r;
}

/* ---- Declarations ------------------------------------------------------------- */

/* typedef ... at i; returns the index after its ';'. */
static int parse_typedef(const header_t *h, int i) {
  const token_t *t = h->tok;
  bool aggregate = is(&t[i + 1], "struct") || is(&t[i + 1], "enum");
  /* typedef struct tag { ... } name; or typedef struct { ... } name; */
  int brace = !aggregate ? -1 : is(&t[i + 2], "{") ? i + 2 : is(&t[i + 3], "{") ? i + 3 : -1;
  if (brace >= 0) {
    int close = matching(h, brace);
    if (!is_ident(&t[close + 1]) || !is(&t[close + 2], ";")) die(t[i].line, "typedef without a name");
    record_t *r = add_record(is(&t[i + 1], "enum") ? RECORD_ENUM : RECORD_STRUCT, h, t[close + 1].text);
    r->first = brace, r->last = close;
    return close + 3;
  }
  int end = i;
  while (end < h->n && !is(&t[end], ";")) end++;
  int name = end - 1; /* typedef T name; or typedef R (*name)(...); */
  if (is(&t[name], ")")) {
    for (name = i; name < end && !(is(&t[name], "*") && is_ident(&t[name + 1])); name++) {}
    name++;
  }
  if (name >= end || !is_ident(&t[name])) die(t[i].line, "a typedef this tool cannot read");
  record_t *r = add_record(aggregate ? RECORD_OPAQUE : RECORD_TYPEDEF, h, t[name].text);
  join(h, i + 1, end, r->decl, sizeof r->decl);
  return end + 1;
}

/* LOOM_API R name(params); at i. */
static int parse_function(const header_t *h, int i) {
  int end = i, paren = -1;
  while (end < h->n && !is(&h->tok[end], ";")) {
    if (paren < 0 && is(&h->tok[end], "(")) paren = end;
    end++;
  }
  if (paren < 1 || !is_ident(&h->tok[paren - 1])) die(h->tok[i].line, "LOOM_API on something not a function");
  record_t *r = add_record(RECORD_FUNCTION, h, h->tok[paren - 1].text);
  join(h, i + 1, end + 1, r->decl, sizeof r->decl);
  return end + 1;
}

/* static inline R name(...) { ... }: a helper compiled into the caller,
 * not a symbol of the library; skipped. */
static int skip_inline(const header_t *h, int i) {
  while (i < h->n && !is(&h->tok[i], "{")) i++;
  if (i == h->n) die(h->tok[h->n - 1].line, "static without a body");
  return matching(h, i) + 1;
}

static void parse_header(header_t *h) {
  cur_path = h->path;
  char *text = read_file(h->path);
  strip(text);
  tokenize(text, h);
  free(text);
  for (int i = 0; i < h->n;) {
    const token_t *t = &h->tok[i];
    if (is(t, "typedef")) i = parse_typedef(h, i);
    else if (is(t, "LOOM_API")) i = parse_function(h, i);
    else if (is(t, "static")) i = skip_inline(h, i);
    else die(t->line, "'%s': a public declaration must be a typedef, a LOOM_API function "
             "or a static inline helper", t->text);
  }
}

/* ---- The tables --------------------------------------------------------------- */

static void emit_enum(const record_t *r) {
  fprintf(out, "static const api_enum_value_t values_%s[] = {\n", r->name);
  const header_t *h = r->h;
  for (int i = r->first + 1; i < r->last; i++) {
    if (!is_ident(&h->tok[i])) die(h->tok[i].line, "%s: an enumerator is not a name", r->name);
    fprintf(out, "    {\"%s\", (long long)%s},\n", h->tok[i].text, h->tok[i].text);
    while (i < r->last && !is(&h->tok[i], ",")) i++;
  }
  fprintf(out, "};\n");
}

static void emit_tables(void) {
  fprintf(out, "const api_function_t api_functions[] = {\n");
  for (int i = 0; i < n_records; i++)
    if (records[i].kind == RECORD_FUNCTION) {
      fprintf(out, "    {\"%s\", \"%s\", ", records[i].name, records[i].header);
      emit_string(records[i].decl);
      fprintf(out, "},\n");
    }
  fprintf(out, "    {0}};\nconst api_struct_t api_structs[] = {\n");
  for (int i = 0; i < n_records; i++)
    if (records[i].kind == RECORD_STRUCT)
      fprintf(out, "    {\"%s\", \"%s\", sizeof(%s), __alignof__(%s), fields_%s, "
              "sizeof fields_%s / sizeof *fields_%s},\n", records[i].name, records[i].header,
              records[i].name, records[i].name, records[i].name, records[i].name, records[i].name);
  fprintf(out, "    {0}};\nconst api_enum_t api_enums[] = {\n");
  for (int i = 0; i < n_records; i++)
    if (records[i].kind == RECORD_ENUM)
      fprintf(out, "    {\"%s\", \"%s\", sizeof(%s), values_%s, sizeof values_%s / sizeof *values_%s},\n",
              records[i].name, records[i].header, records[i].name, records[i].name,
              records[i].name, records[i].name);
  fprintf(out, "    {0}};\nconst api_typedef_t api_typedefs[] = {\n");
  for (int i = 0; i < n_records; i++)
    if (records[i].kind == RECORD_TYPEDEF || records[i].kind == RECORD_OPAQUE) {
      bool opaque = records[i].kind == RECORD_OPAQUE;
      fprintf(out, "    {\"%s\", \"%s\", ", records[i].name, records[i].header);
      emit_string(records[i].decl);
      fprintf(out, opaque ? ", 0},\n" : ", sizeof(%s)},\n", records[i].name);
    }
  fprintf(out, "    {0}};\nconst api_constant_t api_constants[] = {\n");
  for (int i = 0; i < n_constants; i++)
    fprintf(out, "    {\"%s\", (long long)(%s)},\n", constants[i].name, constants[i].name);
  fprintf(out, "    {0}};\n");
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: apigen OUT.c HEADER.h...\n");
    return 2;
  }
  static header_t headers[64];
  int n = argc - 2 < 64 ? argc - 2 : 64;
  for (int k = 0; k < n; k++) {
    headers[k].path = argv[k + 2];
    const char *slash = strrchr(argv[k + 2], '/');
    headers[k].name = slash ? slash + 1 : argv[k + 2];
    parse_header(&headers[k]);
  }
  out = fopen(argv[1], "w");
  if (!out) die(0, "cannot write %s", argv[1]);
  fprintf(out, "/* Generated by tools/apigen.c from the public headers: do not edit. */\n"
               "#include <stddef.h>\n\n#include \"core/api_listing.h\"\n");
  for (int k = 0; k < n; k++) fprintf(out, "#include \"loom/%s\"\n", headers[k].name);
  fprintf(out, "\n#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))\n\n");
  for (int i = 0; i < n_records; i++) {
    cur_path = records[i].header;
    if (records[i].kind == RECORD_STRUCT)
      emit_struct(records[i].h, records[i].first, records[i].last, records[i].name);
    if (records[i].kind == RECORD_ENUM) emit_enum(&records[i]);
  }
  emit_tables();
  return fclose(out) == 0 ? 0 : 1;
}
