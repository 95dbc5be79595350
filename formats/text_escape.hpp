// formats/text_escape.hpp: how bytes that are not printable UTF-8 are shown to people and
// written into JSON.
//
// Contract of escape_unprintable: returns `text` with every byte that is not part of valid
// UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), and, when
// `controls`, every ASCII control character (0x00-0x1f, 0x7f) but tab, written as the four
// characters \xNN (lower-case hex); everything else, multi-byte UTF-8 included, is kept
// byte for byte. A string that is already printable UTF-8 comes back unchanged.
// Its users: the error-line printer (tools/cli_common.cpp shorten_echoes, through which
// tools/main.cpp prints every error line) and every --json output (formats/json_text.hpp),
// so that neither echoes raw bytes nor fails on a non-UTF-8 path (a path with byte 0xff
// is shown as ...\xff...).
#pragma once

#include <string>
#include <string_view>

namespace fb {

std::string escape_unprintable(std::string_view text, bool controls = true);

// One byte as the four characters \xNN (lower-case hex): the form escape_unprintable writes.
std::string escaped_byte(unsigned char byte);

// Whether `text` is well-formed UTF-8 by the same rules (RFC 3629): what a JSON header
// (safetensors metadata, a tensor name) or a JSON report must hold.
bool is_valid_utf8(std::string_view text);

// `text` with every NUL byte written as the four characters \x00: an exception's message is
// read back through what(), a C string, which ended at the first NUL (a merge error echoing a
// CSV cell lost everything after it). The exceptions that echo input (api::InputError,
// TraceError) pass their message through this.
std::string without_nul_bytes(std::string_view text);

}  // namespace fb
