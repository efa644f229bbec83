// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// result.hpp: the value-or-message type every fallible call of the library returns. The message
// is for a person: it names what was wrong (the text, the policy, the field).
#pragma once

#include <expected>
#include <string>

namespace tricolor {

template <typename T>
using Result = std::expected<T, std::string>;

} // namespace tricolor
