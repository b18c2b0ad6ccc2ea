#!/usr/bin/env python3
# Prints random cases for cases.txt: valid sentences of each grammar with up
# to 3 random edits (insert, delete, replace, cut). The committed cases.txt
# ends with this script's output for seed 5; make_verdicts.sh then records
# llama.cpp's verdicts on them.
import random
import sys

random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
samples = {
    'arithmetic.gbnf': ['x=1\n', '(a+b)*c= 2\n', 'a1_b = 42 \nz=(q)\n', 'x = (y + 3) / z\n'],
    'c.gbnf': ['int main(){return 0;}', 'int f(){while(a<b){a = a+1;}}',
               'int f(int x){if(a==b){x = 1;}else{x = 2;}}', 'float g(){// c\n}', 'char h(){/* a*b */}'],
    'chess.gbnf': ['1. e4 e5\n2. Nf3 Nc6\n', '1. e4 e5\n2. O-O O-O-O\n3. Bxc6+ dxc6#\n', '1. e8=Q Kxe2\n12. a3 a6\n'],
    'english.gbnf': ['Hello world.', 'Hi,\tthere!\nBye?', '[x]\\y{z}~ ok'],
    'japanese.gbnf': ['こんにちは', 'カタカナ 漢字、テスト', 'ひらがな\tカタ\nー'],
    'json.gbnf': ['{"a":1}', '{ "a" :[1, 2.5, -3e10, true, false, null] }', '{"a":{"b":{"c":"d\\n\\u00e9é"}}}',
                  '{"key": "value", "n": 0.5}\n', '{"a":-0.25e+3,"b":[]}'],
    'json_arr.gbnf': ['[\n]', '[\n1,\n2]', '[\n{"a":[1,2]},\n"x"]'],
    'list.gbnf': ['- a\n', '- a\n- bc d\n', '- 日本\n- x\n'],
    'any_json.gbnf': ['0', '-12.5e+3', '"a\\"b"', '[1,[2,[3]],{"a":null}]', '{"a":{"b":[true,false]}}',
                      '"\\u00E9é🚀"'],
    'feat_repeat.gbnf': ['ababxycd;', 'abababzzccc.7', 'ababxycfgh.12'],
    'feat_escapes.gbnf': ['Aé😀\t\\"\n[d.x', 'Aé😀\t\\"\r-zéyz', 'Aé😀\t\\"\n]ZZ'],
    'feat_recursion.gbnf': ['a', 'ab,c!!,d', '((()()))', '(5)'],
    'feat_edge.gbnf': ['xyaab.-a]', 'xyaaaacbc.aa^!!!', 'xyaab.--]!'],
}
alpha = list('abcxyz019 .,:;"{}[]()\\-+*/=!\n\t') + ['é', '日', '😀', 'ー']


def esc(s):
    return s.replace('\\', '\\\\').replace('\n', '\\n').replace('\t', '\\t').replace('\r', '\\r')


print('# random edits of valid sentences (gen_cases.py 5)')
for g, ss in samples.items():
    print('grammar ' + g)
    seen = set()
    for _ in range(300):
        s = random.choice(ss)
        for _ in range(random.randint(0, 3)):
            op = random.randint(0, 3)
            i = random.randint(0, len(s))
            if op == 0:
                s = s[:i] + random.choice(alpha) + s[i:]
            elif op == 1 and s:
                s = s[:i] + s[i + 1:]
            elif op == 2 and s:
                s = s[:i] + random.choice(alpha) + s[i + 1:]
            else:
                s = s[:i]
        e = esc(s)
        if e in seen or e == '':
            continue
        seen.add(e)
        print(e)
