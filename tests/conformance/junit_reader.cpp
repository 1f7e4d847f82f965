#include "junit_reader.hpp"

#include <cctype>
#include <cstdlib>

namespace cts_test {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  bool document(XmlElement* root) {
    skip_misc();
    if (starts("<?xml")) {
      size_t end = s_.find("?>", i_);
      if (end == std::string_view::npos) return fail("unterminated XML declaration");
      i_ = end + 2;
    }
    skip_misc();
    if (!element(root)) return false;
    skip_misc();
    if (i_ != s_.size()) return fail("content after the root element");
    return true;
  }
  std::string error;

 private:
  bool fail(std::string why) {
    if (error.empty()) error = "at byte " + std::to_string(i_) + ": " + why;
    return false;
  }
  bool starts(std::string_view p) const { return s_.substr(i_, p.size()) == p; }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void skip_misc() {
    for (;;) {
      skip_ws();
      if (!starts("<!--")) return;
      size_t end = s_.find("-->", i_);
      i_ = end == std::string_view::npos ? s_.size() : end + 3;
    }
  }
  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':';
  }
  bool name(std::string* out) {
    size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    if (i_ == b) return fail("expected a name");
    *out = std::string(s_.substr(b, i_ - b));
    return true;
  }
  // Decodes character data up to (not including) `stop`; '<' inside is an error.
  bool chars(char stop, std::string* out) {
    while (i_ < s_.size() && s_[i_] != stop) {
      char c = s_[i_];
      if (c == '<') return stop == '<' ? true : fail("'<' in an attribute value");
      if (c != '&') {
        *out += c;
        ++i_;
        continue;
      }
      size_t semi = s_.find(';', i_);
      if (semi == std::string_view::npos) return fail("unterminated entity");
      std::string_view ent = s_.substr(i_ + 1, semi - i_ - 1);
      if (ent == "amp") *out += '&';
      else if (ent == "lt") *out += '<';
      else if (ent == "gt") *out += '>';
      else if (ent == "quot") *out += '"';
      else if (ent == "apos") *out += '\'';
      else if (ent.size() > 1 && ent[0] == '#') {
        bool hex = ent[1] == 'x';
        long v = std::strtol(std::string(ent.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
        if (v <= 0 || v > 0x7f) return fail("character reference outside ASCII: &" + std::string(ent) + ";");
        *out += char(v);
      } else {
        return fail("unknown entity &" + std::string(ent) + ";");
      }
      i_ = semi + 1;
    }
    return true;
  }
  bool element(XmlElement* e) {
    if (!starts("<")) return fail("expected '<'");
    ++i_;
    if (!name(&e->name)) return false;
    for (;;) {
      skip_ws();
      if (starts("/>")) {
        i_ += 2;
        return true;
      }
      if (starts(">")) {
        ++i_;
        break;
      }
      std::string key, value;
      if (!name(&key)) return false;
      skip_ws();
      if (!starts("=")) return fail("expected '=' after attribute " + key);
      ++i_;
      skip_ws();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) return fail("expected a quoted value for " + key);
      char q = s_[i_++];
      if (!chars(q, &value)) return false;
      if (i_ >= s_.size()) return fail("unterminated attribute value");
      ++i_;
      if (!e->attributes.emplace(key, value).second) return fail("attribute " + key + " given twice");
    }
    for (;;) {
      if (!chars('<', &e->text)) return false;
      if (i_ >= s_.size()) return fail("unterminated element <" + e->name + ">");
      if (starts("<!--")) {
        skip_misc();
        continue;
      }
      if (starts("</")) {
        i_ += 2;
        std::string end;
        if (!name(&end)) return false;
        if (end != e->name) return fail("</" + end + "> closes <" + e->name + ">");
        skip_ws();
        if (!starts(">")) return fail("expected '>'");
        ++i_;
        return true;
      }
      e->children.emplace_back();
      if (!element(&e->children.back())) return false;
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

bool parse_xml(std::string_view text, XmlElement* root, std::string* error) {
  Reader r(text);
  bool ok = r.document(root);
  if (!ok && error) *error = r.error;
  return ok;
}

}  // namespace cts_test
