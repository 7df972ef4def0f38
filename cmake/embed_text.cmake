# Writes OUT, a C file defining `const char cg_abi_text[]` with the
# contents of IN, so that generated modules carry the runtime's ABI.
file(READ "${IN}" text)
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "\n" "\\n\"\n\"" text "${text}")
file(WRITE "${OUT}" "/* Generated from src/backend/cpu/abi.h by cmake/embed_text.cmake. */\nconst char cg_abi_text[] = \"${text}\";\n")
