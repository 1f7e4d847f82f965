// A small, strict XML reader for the suite's tests: enough to check that the JUnit file is
// well-formed and to read its elements back. Not a general XML parser (no DTDs, no CDATA).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cts_test {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::vector<XmlElement> children;
  std::string text;  // character data directly inside the element, entities decoded

  const XmlElement* child(std::string_view n) const {
    for (auto& c : children)
      if (c.name == n) return &c;
    return nullptr;
  }
  std::string attribute(const std::string& n) const {
    auto it = attributes.find(n);
    return it == attributes.end() ? std::string() : it->second;
  }
};

// Parses a whole document; on failure returns false with `error` saying where and why.
bool parse_xml(std::string_view text, XmlElement* root, std::string* error);

}  // namespace cts_test
