/* How deep a model's messages nest, read from the protobuf wire format
 * before protobuf-c unpacks it: its unpacking recurses once per level, so
 * a small file of subgraphs inside subgraphs (If inside If, 20 bytes a
 * level) would overflow the stack. Only the fields through which ONNX's
 * messages contain themselves are followed: graphs (through nodes,
 * attributes, functions and training info) and types (sequences, maps,
 * optionals). */
#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "frontend/onnx/onnx_import.h"

enum {
  MODEL, GRAPH, NODE, ATTRIBUTE, FUNCTION, TRAINING, VALUE_INFO, TYPE, TYPE_ELEM, TYPE_MAP,
  MOST_LEVELS = 1024, /* a graph level is 3 (graph, node, attribute): 341 nested subgraphs */
};

/* Message `type`'s field `field` as the message type it holds, or -1. */
static int child(int type, uint64_t field) {
  static const struct { int type, field, child; } edges[] = {
      {MODEL, 7, GRAPH},        {MODEL, 25, FUNCTION},   {MODEL, 20, TRAINING},
      {TRAINING, 1, GRAPH},     {TRAINING, 2, GRAPH},    {GRAPH, 1, NODE},
      {GRAPH, 11, VALUE_INFO},  {GRAPH, 12, VALUE_INFO}, {GRAPH, 13, VALUE_INFO},
      {NODE, 5, ATTRIBUTE},     {ATTRIBUTE, 6, GRAPH},   {ATTRIBUTE, 11, GRAPH},
      {ATTRIBUTE, 14, TYPE},    {ATTRIBUTE, 15, TYPE},   {FUNCTION, 7, NODE},
      {FUNCTION, 11, ATTRIBUTE}, {VALUE_INFO, 2, TYPE},  {TYPE, 4, TYPE_ELEM},
      {TYPE, 9, TYPE_ELEM},     {TYPE, 5, TYPE_MAP},     {TYPE_ELEM, 1, TYPE},
      {TYPE_MAP, 2, TYPE},
  };
  for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
    if (edges[i].type == type && (uint64_t)edges[i].field == field) return edges[i].child;
  return -1;
}

/* The varint at *at (before end) into *v; false when it does not end. */
static bool varint(const uint8_t **at, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; *at < end && shift < 64; shift += 7) {
    uint8_t b = *(*at)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

loom_status_t ox_check_nesting(const void *data, size_t size) {
  struct { int type; const uint8_t *end; } stack[MOST_LEVELS + 1];
  const uint8_t *at = data;
  int depth = 0;
  stack[0].type = MODEL, stack[0].end = at + size;
  while (depth >= 0) {
    if (at >= stack[depth].end) {
      at = stack[depth--].end;
      continue;
    }
    uint64_t key, n;
    /* a malformed message: protobuf-c's unpacking says so */
    if (!varint(&at, stack[depth].end, &key)) return LOOM_OK;
    switch (key & 7) {
      case 0:
        if (!varint(&at, stack[depth].end, &n)) return LOOM_OK;
        break;
      case 1:
      case 5: {
        size_t w = (key & 7) == 1 ? 8 : 4;
        if ((size_t)(stack[depth].end - at) < w) return LOOM_OK;
        at += w;
        break;
      }
      case 2: {
        if (!varint(&at, stack[depth].end, &n) || n > (uint64_t)(stack[depth].end - at))
          return LOOM_OK;
        int c = child(stack[depth].type, key >> 3);
        if (c < 0) {
          at += n;
          break;
        }
        if (depth == MOST_LEVELS)
          return loom_fail(LOOM_ERR_FORMAT, "ONNX model: messages nested more than %d deep "
                           "(subgraphs inside subgraphs, or types inside types)", MOST_LEVELS);
        depth++;
        stack[depth].type = c, stack[depth].end = at + n;
        break;
      }
      default:
        return LOOM_OK;
    }
  }
  return LOOM_OK;
}
