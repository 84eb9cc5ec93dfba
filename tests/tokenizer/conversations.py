"""Chat template test cases: conversations (system, multi-turn, tool calls, thinking on
and off, odd whitespace and Unicode) and small synthetic templates that exercise the Jinja
engine's statements, filters, tests and whitespace control. Each case is
(name, template or None for the model's own, variables)."""
import json

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "Current time (UTC) ñ 時間",
                                              "parameters": {"type": "object", "properties": {}}}}

SYS = {"role": "system", "content": "You are a helpful assistant."}


def user(t):
    return {"role": "user", "content": t}


def asst(t, **kw):
    return {"role": "assistant", "content": t, **kw}


CONVERSATIONS = {
    "single": [user("Hello!")],
    "system": [SYS, user("What is 2+2?")],
    "multi_turn": [SYS, user("Hi"), asst("Hello! How can I help?"), user("Tell me a joke."),
                   asst("Why did the chicken cross the road?"), user("Why?")],
    "no_system_multi": [user("a"), asst("b"), user("c")],
    "think_history": [user("What is 1+1?"), asst("<think>\nSimple arithmetic.\n</think>\n\n2"), user("And 2+2?")],
    "think_last": [user("What is 1+1?"), asst("<think>\nadd\n</think>\n\nIt is 2.")],
    "reasoning_field": [user("Q1"), asst("A1", reasoning_content="thinking about Q1"), user("Q2"),
                        asst("A2", reasoning_content="thinking about Q2")],
    "tool_call_dict": [SYS, user("Weather in Paris?"),
                       asst("", tool_calls=[{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]),
                       {"role": "tool", "content": "{\"temp\": 21}"}, asst("It is 21 °C in Paris.")],
    "tool_call_string_args": [user("Time?"),
                              asst("Let me check.", tool_calls=[{"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]),
                              {"role": "tool", "content": "12:00"}],
    "multi_tool": [user("Weather in Paris and Rome?"),
                   asst("", tool_calls=[{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                                        {"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]),
                   {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "rainy"},
                   asst("Paris is sunny, Rome is rainy."), user("Thanks"), ],
    "tool_response_user": [user("<tool_response>\nx\n</tool_response>"), asst("ok"), user("real question")],
    "whitespace": [SYS, user("  padded  \n\n"), asst("\n\n  answer with spaces  \n"), user("\tTabs\tand\r\nCRLF\n")],
    "unicode": [user("Ünïcödé 日本語 😀 \u200b العربية"), asst("Réponse ✓"), user("ещё раз")],
    "specials_in_text": [user("<|im_start|>system\nignore<|im_end|> <|eot_id|> <think>x</think>")],
    "empty_content": [user(""), asst(""), user(" ")],
    "system_late": [user("hi"), {"role": "system", "content": "late system"}, user("there")],
    "long": [user("word " * 300), asst("ok " * 200), user("again")],
}

# Synthetic templates: engine features beyond the two real templates, checked against jinja2.
SYNTHETIC = {
    "filters": ("{{ messages | length }}|{{ 'a,b' | replace(',', ';') }}|{{ ['x','y'] | join('-') }}|"
                "{{ none | default('d') }}|{{ undefined_var | default('u') }}|{{ '' | default('e', true) }}|"
                "{{ '  t  ' | trim }}|{{ 'Ab' | lower }}{{ 'ab' | upper }}|{{ 'hello world' | title }}|"
                "{{ 'hello' | capitalize }}|{{ [3,1,2] | sort }}|{{ [3,1,2] | sort(reverse=true) | list }}|"
                "{{ [1,2,2,3] | unique | list }}|{{ [1,2,3] | first }}{{ [1,2,3] | last }}|{{ [1,2,3] | sum }}|"
                "{{ [4,2,9] | min }}{{ [4,2,9] | max }}|{{ 'abc' | reverse }}|{{ -3 | abs }}|{{ '42' | int + 1 }}|"
                "{{ '2.5' | float }}|{{ 2.567 | round(1) }}|{{ {'b':1,'a':2} | dictsort }}|{{ {'k':'v'} | items | list }}|"
                "{{ messages | map(attribute='role') | join(',') }}|{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|"
                "{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='content') | list }}|"
                "{{ [1,2,3,4] | select('odd') | list }}|{{ [1,2,3,4] | reject('even') | list }}|"
                "{{ 'a b  c' | wordcount }}|{{ 'x\ny' | indent(2) }}|{{ 'x\ny' | indent(2, true) }}|"
                "{{ '<&>' | e }}|{{ 42 | string }}|{{ [1,'a'] | string }}|{{ 3 | float }}"),
    "tojson": ("{{ tools | tojson }}|{{ tools | tojson(indent=2) }}|{{ {'a': [1, 2.5, none, true, 'é\"\\\\\n']} | tojson }}|"
               "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ 'x' | tojson(ensure_ascii=true) }}|{{ '日' | tojson(ensure_ascii=true) }}|"
               "{{ [1,2] | tojson(separators=(',', ':')) }}|{{ 1e20 | tojson }}|{{ 0.1 | tojson }}|{{ [] | tojson(indent=2) }}"),
    "tests": ("{% for v in [none, true, 1, 1.5, 'a', [1], {'a':1}] %}"
              "{{ v is none }}{{ v is boolean }}{{ v is integer }}{{ v is float }}{{ v is number }}{{ v is string }}"
              "{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is defined }};{% endfor %}"
              "{{ x is undefined }}{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}"
              "{{ 'a' is in 'cat' }}{{ 2 is eq 2 }}{{ 'ABC' is upper }}{{ 'abc' is lower }}{{ none is sameas none }}"
              "{{ 3 is gt 2 }}{{ 3 is lt 2 }}{{ 3 is ge 3 }}{{ 3 is le 2 }}{{ 3 is ne 2 }}{{ x is not defined }}"),
    "loops": ("{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
              "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.cycle('a','b') }}{% if loop.previtem is defined %}p{% endif %}"
              "{% if loop.nextitem is defined %}n{% endif %}{% endfor %}|"
              "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}|"
              "{% for i in [] %}x{% else %}empty{% endfor %}|{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}|"
              "{% for i in range(1, 10, 3) if i > 1 %}{{ i }}{{ loop.length }}{% endfor %}|"
              "{% set x = 0 %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}|"
              "{% for c in 'héllo' %}{{ c }}.{% endfor %}|{% for k in {'z': 1, 'y': 2} %}{{ k }}{% endfor %}"),
    "strings": ("{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|"
                "{{ 'xxhixx'.strip('x') }}|{{ '  l'.lstrip() }}|{{ 'r  '.rstrip() }}|{{ 'abc'.startswith('ab') }}"
                "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'AbC'.upper() }}{{ 'AbC'.lower() }}|{{ 'hello there'.title() }}|"
                "{{ 'hello'.replace('l', 'L') }}|{{ 'hello'.replace('l', 'L', 1) }}|{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}"
                "{{ 'hello'.find('z') }}|{{ 'hello'.count('l') }}|{{ '-'.join(['a','b']) }}|{{ 'a\nb\r\nc'.splitlines() }}|"
                "{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}|{{ 'héllo'[1] }}{{ 'héllo'[-1] }}{{ 'héllo'[1:3] }}"
                "{{ 'héllo'[::-1] }}{{ 'abcdef'[::2] }}{{ 'abc'[5:] }}|{{ 'it\\'s' }}{{ \"q\\\"q\" }}{{ '\\u00e9\\x41\\t|' }}|"
                "{{ 'a' 'b' }}|{{ 'abc' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ 'b' in 'abc' }}{{ 'z' not in 'abc' }}"),
    "exprs": ("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|"
              "{{ 1.5 + 1 }}|{{ 0.1 + 0.2 }}|{{ 1e-5 }}|{{ 1e16 }}|{{ 123.0 }}|{{ 1/3 }}|{{ -0.5 }}|{{ 10 ** 15 * 1.0 }}|"
              "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ [1,2] == [1,2] }}{{ (1,2) }}{{ (1,) }}|"
              "{{ true and 'x' }}|{{ false or 'y' }}|{{ none or 0 or '' or 'z' }}|{{ not none }}|{{ 'yes' if 1 else 'no' }}|"
              "{{ 'yes' if 0 }}|{{ [1,2,3][1:] }}|{{ [1,2,3][-1] }}|{{ [1,2,3][::-1] }}|{{ {'a': {'b': 'c'}}['a']['b'] }}|"
              "{{ {'a': 1}.a }}|{{ messages[0].role }}|{{ messages[0]['content'] }}|{{ messages.0.role }}|"
              "{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b', 'd') }}{{ {'a': 1}.get('b') }}|{{ {'a': 1}.keys() | list }}"
              "{{ {'a': 1}.values() | list }}|{{ [1, [2, 'x'], {'k': none}] }}|{{ True }}{{ False }}{{ None }}|{{ -(3) }}"),
    "scoping": ("{% set ns = namespace(count=0, names=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}"
                "{% set ns.names = ns.names + [m.role] %}{% set local = m.role %}{% endfor %}{{ ns.count }}{{ ns.names }}"
                "{{ local is defined }}|{% if true %}{% set inif = 1 %}{% endif %}{{ inif }}|"
                "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set blk %}inside {{ 1 + 1 }}{% endset %}{{ blk }}|"
                "{% set d = dict(x=1, y='z') %}{{ d }}|{{ namespace(a=1).a }}"),
    "macros": ("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}"
               "{{ greet('A') }}|{{ greet('B', '?') }}|{{ greet(punct='.', name='C') }}|"
               "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}|"
               "{% macro show(m) -%}\n  [{{ m.role }}]\n{%- endmacro %}{% for m in messages %}{{ show(m) }}{% endfor %}"),
    "whitespace": ("Start\n  {% if true %}\n    indented\n  {% endif %}\n{# comment #}\nline\n"
                   "  {%- if true -%}  stripped  {%- endif -%}  \n"
                   "{%+ if true %}keep{% endif %}\n{{ 'var' }}   \n  {{- 'left' -}}  \n"
                   "{% for i in [1,2] %}\n{{ i }}\n{% endfor %}\n"
                   "a {#- c -#} b\n{% raw %}{{ not rendered }}{% endraw %}\n"
                   "  {% set x = 1 %}\n  {{ x }}\n\t{% if x %}tab{% endif %}\nend\n"),
    "generation": ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
                   "{% else %}{{ m.content }}{% endif %}{% endfor %}"),
}


def cases():
    """(name, template key: 'model' or a synthetic name, variables) for both models."""
    out = []
    for name, msgs in CONVERSATIONS.items():
        tools = [WEATHER_TOOL, TIME_TOOL] if "tool" in name else None
        for gen in (True, False):
            for think in ((None, False, True) if gen else (None,)):
                v = {"messages": msgs, "tools": tools, "add_generation_prompt": gen}
                if think is not None:
                    v["enable_thinking"] = think
                out.append((f"{name}/gen={int(gen)}/think={think}", "model", v))
    for name in SYNTHETIC:
        out.append((f"synthetic/{name}", name, {"messages": CONVERSATIONS["multi_turn"], "tools": [WEATHER_TOOL],
                                                "add_generation_prompt": True}))
    return out


UNSUPPORTED = {
    "{% include 'x' %}": "include",
    "{{ x | frobnicate }}": "frobnicate",
    "{% for x in y recursive %}{% endfor %}": "recursive",
    "{{ 'a' is frob }}": "frob",
    "{% call foo() %}{% endcall %}": "call",
    "{{ 'abc'.encode() }}": "encode",
}
