/* Reference kernel of assign. */
#include <string.h>

#include "kernels/ref.h"

/* Writes input 1 into input 0, the parameter's storage. The interpreter
 * runs assigns after every other node, so that reads see the old state. */
loom_status_t ref_assign(ref_call_t *c) {
  loom_tensor_t *param = (loom_tensor_t *)c->in[0];
  size_t bytes = (size_t)loom_tensor_numel(param) * loom_dtype_size(param->dtype);
  if (bytes) memcpy(param->data, c->in[1]->data, bytes);
  return LOOM_OK;
}
