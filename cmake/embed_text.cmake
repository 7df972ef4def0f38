# Writes OUT, a C file defining `const char NAME[]` with the contents of
# IN, so that generated modules carry a source file of the runtime as it
# was built (the ABI, the float math).
file(READ "${IN}" text)
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "\n" "\\n\"\n\"" text "${text}")
file(RELATIVE_PATH from "${ROOT}" "${IN}")
file(WRITE "${OUT}" "/* Generated from ${from} by cmake/embed_text.cmake. */\nconst char ${NAME}[] = \"${text}\";\n")
