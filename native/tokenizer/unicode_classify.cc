#include "tokenizer/unicode_categories.h"

namespace bloomery::tokenizer {

bool is_whitespace(uint32_t cpt) {
  if (cpt < 0x80) return (cpt >= 0x09 && cpt <= 0x0d) || cpt == 0x20;
  switch (cpt) {
    case 0x85:
    case 0xa0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
    case 0x3000:
      return true;
    default:
      return cpt >= 0x2000 && cpt <= 0x200a;
  }
}

CharClass classify(uint32_t cpt) {
  CharClass c;
  if (is_whitespace(cpt)) {
    c.whitespace = true;
    return c;
  }
  switch (category(cpt)) {
    case Category::kLetter:
      c.letter = true;
      break;
    case Category::kNumber:
      c.number = true;
      break;
    case Category::kMark:
      c.mark = true;
      break;
    case Category::kPunctuation:
      c.punctuation = true;
      break;
    case Category::kSymbol:
      c.symbol = true;
      break;
    default:
      break;
  }
  return c;
}

}  // namespace bloomery::tokenizer
