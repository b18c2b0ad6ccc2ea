// JSON Schema string formats as GBNF over the string's contents: date
// (month lengths and leap years exact), time and date-time (RFC 3339, leap
// seconds only where the time is 23:59:60 UTC after its offset), uuid,
// email (dot-atom or quoted local part; host name, IPv4 or IPv6 literal
// domain) and ipv4 (dotted decimal, no leading zeros).
#include <cstdio>
#include <functional>
#include <map>

#include "gen/grammar_schema.h"

namespace clade::grammar::detail {

namespace {

std::string two(int v) {
  char b[8];
  std::snprintf(b, sizeof b, "%02d", v);
  return b;
}

std::string date(Rules& r) {
  const std::string d31 = "(\"0\" [1-9] | [12] [0-9] | \"3\" [01])";
  const std::string d30 = "(\"0\" [1-9] | [12] [0-9] | \"30\")";
  const std::string d28 = "(\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])";
  const std::string md = r.add("month-day", "(\"0\" [13578] | \"1\" [02]) \"-\" " + d31 + " | (\"0\" [469] | \"11\") \"-\" " +
                                                d30 + " | \"02-\" " + d28);
  const std::string leap =
      r.add("leap-year", "[0-9] [0-9] ([02468] [48] | [13579] [26] | [2468] \"0\") | ([02468] [048] | [13579] [26]) \"00\"");
  return r.add("date", "[0-9]{4} \"-\" " + md + " | " + leap + " \"-02-29\"");
}

// 23:59:60 UTC in every local time and offset. Written as a trie over the
// local time's digits (each local time has its own offsets), so that a
// matcher keeps a few stacks here rather than one per alternative.
std::string leap_second(Rules& r) {
  const std::string sec = r.add("leap-sec", "\":60\" (\".\" [0-9]+)?");
  std::map<std::string, std::string> offsets;  // local "HH:MM" -> its offsets' alternatives
  auto add = [&](int local, const std::string& off) {
    std::string& o = offsets[two(local / 60) + ":" + two(local % 60)];
    o += (o.empty() ? "" : " | ") + off;
  };
  add(23 * 60 + 59, "[Zz]");
  for (int oh = 0; oh < 24; oh++)
    for (int om = 0; om < 60; om++) {
      // +oh:om: local = 23:59 + offset; -oh:om: local = 23:59 - offset.
      add((23 * 60 + 59 + oh * 60 + om) % (24 * 60), "\"+" + two(oh) + ":" + two(om) + "\"");
      add(23 * 60 + 59 - oh * 60 - om, "\"-" + two(oh) + ":" + two(om) + "\"");
    }
  // the trie over the five characters of the local times (map order: each
  // prefix's keys are contiguous)
  std::function<std::string(const std::string&)> node = [&](const std::string& prefix) -> std::string {
    if (prefix.size() == 5) return sec + " (" + offsets[prefix] + ")";
    std::string body;
    std::string last;
    for (auto it = offsets.lower_bound(prefix); it != offsets.end() && it->first.compare(0, prefix.size(), prefix) == 0;
         ++it) {
      const std::string next = it->first.substr(0, prefix.size() + 1);
      if (next == last) continue;
      last = next;
      body += (body.empty() ? "" : " | ") + std::string("\"") + next.back() + "\" " + node(next);
    }
    return "(" + body + ")";
  };
  return r.add("leap-time", node(""));
}

std::string time(Rules& r) {
  const std::string hour = "([01] [0-9] | \"2\" [0-3])";
  const std::string offset = r.add("time-offset", "[Zz] | [-+] " + hour + " \":\" [0-5] [0-9]");
  return r.add("time", hour + " \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]+)? " + offset + " | " + leap_second(r));
}

std::string ipv4(Rules& r) {
  const std::string oct = r.add("dec-octet", "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]");
  return r.add("ipv4", oct + " \".\" " + oct + " \".\" " + oct + " \".\" " + oct);
}

std::string ipv6(Rules& r) {
  const std::string h16 = r.add("h16", "[0-9a-fA-F]{1,4}");
  const std::string ls32 = r.add("ls32", h16 + " \":\" " + h16 + " | " + ipv4(r));
  auto times = [&](int n) {  // n x (h16 ":")
    std::string s;
    for (int i = 0; i < n; i++) s += (s.empty() ? "" : " ") + h16 + " \":\"";
    return s;
  };
  auto upto = [&](int n) {  // [ *n( h16 ":" ) h16 ]
    if (n == 0) return "(" + h16 + ")?";
    return "((" + h16 + " \":\"){0," + std::to_string(n) + "} " + h16 + ")?";
  };
  std::string body = times(6) + " " + ls32;
  body += " | \"::\" " + times(5) + " " + ls32;
  for (int k = 0; k <= 4; k++) {
    const int tail = 4 - k;  // (h16 ":") count after "::"
    body += " | " + upto(k) + " \"::\" " + (tail ? times(tail) + " " : "") + ls32;
  }
  body += " | " + upto(5) + " \"::\" " + h16;
  body += " | " + upto(6) + " \"::\"";
  return r.add("ipv6", body);
}

std::string email(Rules& r) {
  const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\x2D]";
  const std::string dot_atom = atext + "+ (\".\" " + atext + "+)*";
  // Quoted local part, in its JSON-escaped form: \" opens and closes it.
  const std::string qtext = "[ !#-\\x5B\\x5D-~]";
  const std::string qpair = "\"\\\\\\\\\" ([ !#-\\x5B\\x5D-~] | \"\\\\\\\"\" | \"\\\\\\\\\")";
  const std::string quoted = "\"\\\\\\\"\" (" + qtext + " | " + qpair + ")* \"\\\\\\\"\"";
  const std::string local = r.add("email-local", dot_atom + " | " + quoted);
  const std::string label = "[A-Za-z0-9] ([A-Za-z0-9\\x2D]* [A-Za-z0-9])?";
  const std::string host = r.add("hostname", label + " (\".\" " + label + ")*");
  const std::string domain = r.add("email-domain", host + " | \"[\" " + ipv4(r) + " \"]\" | \"[IPv6:\" " + ipv6(r) + " \"]\"");
  return r.add("email", local + " \"@\" " + domain);
}

}  // namespace

std::optional<std::string> format_expr(Rules& r, std::string_view f) {
  if (f == "date") return date(r);
  if (f == "time") return time(r);
  if (f == "date-time") return r.add("date-time", date(r) + " [Tt] " + time(r));
  if (f == "uuid") {
    const std::string h = "[0-9a-fA-F]";
    return r.add("uuid", h + "{8} \"-\" " + h + "{4} \"-\" " + h + "{4} \"-\" " + h + "{4} \"-\" " + h + "{12}");
  }
  if (f == "ipv4") return ipv4(r);
  if (f == "email") return email(r);
  return std::nullopt;
}

}  // namespace clade::grammar::detail
