/* The reference back end (backend_ref.c): each single-node group runs its
 * node's reference kernel. The target "ref", and the back end that runs
 * what another target did not build. */
#ifndef LOOM_BACKEND_REF_BACKEND_REF_H
#define LOOM_BACKEND_REF_BACKEND_REF_H

#include "backend/backend.h"

extern const be_backend_t be_ref;

#endif
