#!/usr/bin/env python3
"""make_corpus.py OUT [MB] — a few MB of mixed text for the tokenizer benchmark.

Deterministic (fixed seed): the shared tokenizer test inputs, cera's own C sources
(code, comments, symbols), and generated prose in English, German, French, Russian,
Greek, Chinese, Japanese, Korean, Hindi and Arabic, with digits, punctuation, emoji and
assorted whitespace, in roughly equal thirds of code, English and other scripts.
"""
import glob
import os
import random
import sys

out = sys.argv[1]
target = int(float(sys.argv[2] if len(sys.argv) > 2 else 4) * 1e6)
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
shared = os.environ.get("CERA_SHARED_DIR", os.path.join(os.path.dirname(root), "shared"))
rng = random.Random(1234)

parts = []
for f in sorted(glob.glob(os.path.join(shared, "vocab", "*.inp"))):
    parts.append(open(f, "rb").read())
code = b""
for f in sorted(glob.glob(os.path.join(root, "src", "**", "*.[ch]"), recursive=True)):
    code += open(f, "rb").read()

vocab = {
    "en": "the of and to in is was that for it with as his on be at by had this from not are but have you which one were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three".split(),
    "de": "der die und in den von zu das mit sich des auf für ist im dem nicht ein Die eine als auch es an werden aus er hat daß sie nach wird bei einer Der um am sind noch wie einem über einen Das so Sie zum war haben nur oder aber vor zur bis mehr durch man sein wurde sei In Prozent hatte kann gegen vom können schon wenn habe seine Mark ihre dann unter wir soll ich eines Es Jahr zwei Jahren diese dieser wieder keine Uhr seiner worden Und will zwischen Im immer Millionen Ein was sagte Größe Straße Äpfel Übung fünf".split(),
    "fr": "de la le et les des en un du une que est pour qui dans a par plus pas au sur ne se Le ce il sont La Les ou avec son Il aux d'un En cette d'une ont ses mais comme on tout nous sa Et été aussi leur bien peut ces y deux A ans l' encore n'est marché d' Pour donc cours qu'il moins sans C'est Un entre faire elle c'est peu vous Une prix On dont lui également Dans effet pays cas De millions Belgique BEF mois leurs taux années temps groupe où été déjà très ça à çà œuvre".split(),
    "ru": "и в не на я быть он с что а по это она этот к но они мы как из у который то за свой что весь год от так о для ты же все тот мочь вы человек такой его сказать только или еще бы себя один как уже до время если сам когда другой вот говорить наш мой знать стать при чтобы дело жизнь кто первый очень два день её новый рука даже во со раз где там под можно ну какой после их работа без самый потом надо хотеть ли слово идти большой должен место иметь ничто".split(),
    "el": "και το η της του να ο σε με που τα για των από στο είναι την θα στην δεν τον οι ένα στη ως στα μια αυτό αλλά ή μας στον κατά τη έχει όπως στις τους μου σας".split(),
    "zh": list("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从"),
    "ja": "これは 日本語の 文章です。 東京 大阪 京都 ひらがな カタカナ 漢字 です ます した する ある いる なる こと もの ため よう".split(),
    "ko": "나는 너는 우리는 한국어 문장 입니다 학교 사람 시간 오늘 내일 어제 사랑 하다 있다 없다 되다 그리고 하지만".split(),
    "hi": "मैं तुम हम वह यह है हैं था थे और या लेकिन क्योंकि भारत हिन्दी भाषा शब्द वाक्य समय दिन रात".split(),
    "ar": "في من على إلى عن مع هذا هذه ذلك التي الذي كان كانت يكون العربية اللغة كلمة جملة وقت يوم".split(),
}
punct = [".", ",", "!", "?", ";", ":", " -", " (", ")", '"', "'", "...", "—", "«", "»", "。", "、", "！"]
emoji = ["🦙", "🚀", "😶‍🌫️", "✅", "👍🏽", "🇫🇷", "❤️"]
spaces = [" "] * 20 + ["  ", "\n", "\n\n", "\t", "\r\n", "   "]


def sentence(lang):
    w = vocab[lang]
    sep = "" if lang in ("zh",) else " "
    n = rng.randint(4, 18)
    words = [rng.choice(w) for _ in range(n)]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words) + 1), str(rng.randint(0, 10 ** rng.randint(1, 9))))
    if rng.random() < 0.1:
        words.insert(rng.randrange(len(words) + 1), rng.choice(emoji))
    s = sep.join(words)
    s = s[0].upper() + s[1:] + rng.choice(punct[:6])
    return s


third = target // 3
text_code = (code * (third // max(1, len(code)) + 1))[:third]
en = []
size = 0
while size < third:
    s = sentence("en") + rng.choice(spaces)
    en.append(s)
    size += len(s.encode())
other = []
size = 0
langs = [l for l in vocab if l != "en"]
while size < target - 2 * third:
    s = sentence(rng.choice(langs)) + rng.choice(spaces)
    other.append(s)
    size += len(s.encode())
data = b"".join(parts) + text_code + "".join(en).encode() + "".join(other).encode()
open(out, "wb").write(data)
print(f"{out}: {len(data)} bytes")
