/**
 * An adversarial corpus for tokenizer tests: the texts where tokenizers differ, written
 * for these tests, plus seeded random mixes of their awkward pieces.
 */

/** Hand-written cases, one concern each. */
export const HAND_CASES: string[] = [
  "",
  " ",
  "  ",
  "\n",
  "Hello world",
  " Hello world",
  "Hello, World! How ARE you? I'm fine; you're late, they've gone, we'll see, he'd know, it's 'quoted'.",
  "DON'T SHOUT. I'M HERE. YOU'RE LATE. WE'LL SEE. THEY'VE GONE. HE'D KNOW. IT'S 'S'T'RE'VE'M'LL'D",
  "don't can't won't shouldn't y'all o'clock rock'n'roll '''' 's 'S 'll 'LL 'lL 'Re",
  "1 12 123 1234 12345 123456 1234567 12345678 3.14159 -42 +7 1,000,000 0x1F 1e-9 v2.0.1",
  "٣٤٥ ½ ¾ Ⅻ ①②③ ４２ ９９９９ 𝟙𝟚𝟛",
  "a  b   c    d     e\t\tf\n\ng\r\nh \n i\t \n j    \n\n\n    k",
  "   leading and trailing   ",
  "\n\n\n\n",
  "\t\t\t\t",
  " \t \n \r\n \u000b \f end",
  "tab\tseparated\tvalues\tand\ttrailing\t",
  "line one\nline two\r\nline three\rline four\u2028line five\u2029para\u0085nel",
  "non\u00a0breaking\u00a0space and ideographic\u3000space and thin\u2009space and narrow\u202fnbsp",
  "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom\u00adsoft-hyphen",
  "日本語のテキストと漢字、ひらがな、カタカナ。東京は晴れです！",
  "中文文本：你好，世界！这是一个测试。龥龦鿿",
  "Ｆｕｌｌｗｉｄｔｈ！（ｔｅｓｔ）：～ ‘curly’ “quotes” ‛‟ 。、 ☀★→∞ Ꭰᏸ ⅅℂ ⰀⱾ ꙀꚀ µǄʔʘ ﬀ 𐐀 𞤀 Ͱͻ ჿ end \u3000\u2028",
  "Han and the rest: 漢字かな漢字カナabc漢def 𠀀𠀁 㐀㐁 豈更 (漢) '漢 it's漢 WE'LL漢 漢'll 한漢 ㄱ漢 Ελ漢",
  "한국어 텍스트: 안녕하세요, 세계! ㄱㄴㄷ",
  "ไทย ภาษาไทย สวัสดีครับ",
  "हिन्दी भाषा: नमस्ते दुनिया। বাংলা ভাষা",
  "Ελληνικά: Καλημέρα κόσμε. Русский: Привет, мир! Українська: Ґґ Єє Її",
  "עברית: שלום עולם. العربية: مرحبا بالعالم ١٢٣",
  "Café naïve résumé Ångström façade Œuvre Æsir straße İstanbul ǅemal ǈubljana",
  "e\u0301 a\u0308 o\u0302\u0303 n\u0303 Z\u0351\u0352\u0353\u0354\u0355 i\u0307\u0301 \u0301leading mark",
  "ÀÉÎÕÜ ÑANDÚ naÏVe MiXeD ČeŠtIna ĞüŞ",
  "😀 😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇯🇵 ❤️ ✨ 🤖🧠 👩🏾‍💻",
  "emoji😀glued😀to😀words and 1😀2😀3",
  "Math: ∑ᵢ xᵢ² ≤ ∞, ∀x∈ℝ: √x ≥ 0; α+β=γ; ∂f/∂x ≠ ∇f; ℵ₀ < 𝔠",
  "Symbols: © ® ™ € £ ¥ ₹ ₿ § ¶ † ‡ • … ‰ ′ ″ ‹ › « » “quotes” ‘single’ — – ¡¿",
  "Punctuation!!! ??? ... ,,, ;;; ::: --- ___ *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| ~~~ ```",
  "path/to/file.txt C:\\Windows\\System32 https://example.com/a/b?c=d&e=f#g user@example.com //comment /* block */",
  "function add(a, b) {\n  return a + b;\n}\n\nconst x = add(1, 2); // 3\nif (x >= 3 && x !== 4) { console.log(`x=${x}`); }\n",
  "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n",
  '#include <stdio.h>\nint main(void) {\n\tprintf("%d\\n", 42);\n\treturn 0;\n}\n',
  "SELECT id, name FROM users WHERE age > 21 AND name LIKE '%o%' ORDER BY id DESC;",
  '{"key": "value", "n": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}',
  '<div class="x"><p>Hello&nbsp;&amp;&lt;world&gt;</p></div>',
  "snake_case camelCase PascalCase SCREAMING_CASE kebab-case dot.case HTTPServer XMLHttpRequest iOS macOS",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "ABABABABABABABABABABABABABABABAB abababababababab 1111111111111111111111",
  "                                                                    x",
  "\u0000\u0001\u0002\u001b[31mred\u001b[0m\u007f\u001c\u001d\u001e\u001f",
  "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>",
  "<|endoftext|><|startoftext|><|return|><|channel|>analysis<|message|>hi<|end|><|call|>",
  "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>ok<｜end▁of▁sentence｜>",
  '<think>\nreasoning here\n</think>\n\n<tool_call>\n{"name": "f"}\n</tool_call>',
  "<|im_start <|im_start| |im_start|> <|IM_START|> <|<|im_end|>|> <<|im_end|>> <|im_end|><|im_end|>",
  "fim: <|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|> <|reserved_special_token_5|>",
  "▁leading▁lower▁one▁eighth▁blocks and Ġ Ċ ĉ symbols in text",
  "\ud83d\ude00 lone surrogates are replaced: \ud800 and \udfff",
];

/** Pieces the random mixes are built from. */
const ATOMS: string[] = [
  " ",
  "  ",
  "   ",
  "\t",
  "\n",
  "\n\n",
  "\r\n",
  " \n",
  "\u00a0",
  "\u3000",
  "\u2009",
  "a",
  "A",
  "the",
  "The",
  "THE",
  " quick",
  "Brown",
  "FOX",
  "jumps",
  "ÉCOLE",
  "école",
  "ß",
  "İ",
  "ǅ",
  "'s",
  "'S",
  "'t",
  "'re",
  "'VE",
  "'m",
  "'ll",
  "'D",
  "'",
  "''",
  "'x",
  "0",
  "7",
  "42",
  "123",
  "2024",
  "99999",
  "3.14",
  "½",
  "٣",
  "４",
  ".",
  ",",
  "!",
  "?",
  "...",
  "—",
  "-",
  "_",
  "/",
  "//",
  "\\",
  "(",
  ")",
  "[",
  "]",
  "{",
  "}",
  "<",
  ">",
  "=",
  "==",
  "=>",
  "$",
  "%",
  "^",
  "&",
  "*",
  "+",
  "|",
  "~",
  "`",
  "@",
  "#",
  ";",
  ":",
  '"',
  "«",
  "»",
  "日本",
  "語",
  "の",
  "カタカナ",
  "中文",
  "字",
  "한국",
  "ไทย",
  "हिन्दी",
  "Ελλάδα",
  "Москва",
  "עברית",
  "عربي",
  "\u0301",
  "e\u0301",
  "\u0308",
  "😀",
  "👍🏽",
  "👨‍👩‍👧",
  "🇯🇵",
  "❤️",
  "∑",
  "√",
  "€",
  "©",
  "\u200b",
  "\u200d",
  "\ufeff",
  "\u0085",
  "\u2028",
  "<|im_start|>",
  "<|im_end|>",
  "<|endoftext|>",
  "<|eot_id|>",
  "<|begin_of_text|>",
  "<think>",
  "</think>",
  "<|return|>",
  "<｜end▁of▁sentence｜>",
  "<|im_",
  "|>",
  "<|",
  "▁",
  "Ġ",
];

/** A seeded xorshift32: the same mixes on every run. */
function random(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 0x100000000;
  };
}

/** `count` random concatenations of 4-40 atoms each. */
export function randomMixes(count: number, seed = 12345): string[] {
  const next = random(seed);
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    const n = 4 + Math.floor(next() * 37);
    let s = "";
    for (let k = 0; k < n; k++) s += ATOMS[Math.floor(next() * ATOMS.length)];
    out.push(s);
  }
  return out;
}

/**
 * Long runs, each one pre-tokenized word (or a few): thousands of merges in one word, where
 * equal ranks queue up and merges create pairs left of ones still waiting.
 */
export const LONG_CASES: string[] = [
  " ".repeat(5000),
  "\n".repeat(3000),
  " \t".repeat(2000) + "x",
  "  \n".repeat(1500) + " end",
  "a".repeat(4000),
  "ab".repeat(3000),
  "=".repeat(3000),
  "0".repeat(3000),
  "ー".repeat(2000),
  longWord(6000, 7),
];

/** `length` letters drawn from a seeded generator, as one word. */
function longWord(length: number, seed: number): string {
  const next = random(seed);
  let s = "";
  for (let i = 0; i < length; i++) s += "etaoinshrdlucmfwypvbgkqjxz"[Math.floor(next() ** 2 * 26)];
  return s;
}

/** The whole corpus: hand-written cases, long runs, then random mixes. */
export const CORPUS: string[] = [...HAND_CASES, ...LONG_CASES, ...randomMixes(300)];
