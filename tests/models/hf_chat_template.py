# Renders a Jinja chat template the way Hugging Face transformers' apply_chat_template does (its
# Jinja environment: trim_blocks, lstrip_blocks, loopcontrols, the `tojson` filter and the
# raise_exception and strftime_now globals), as the reference the chat-template tests compare ooze's built-in
# renderings with.
#
# stdin: a JSON object {"template": JINJA, "messages": [...], "tools": [...] or null,
#   "add_generation_prompt": bool, "enable_thinking": bool (optional),
#   "parse_arguments": bool (optional), "bos_token": text (optional)}. With parse_arguments the tool calls' arguments strings
#   are parsed first, as SGLang does before rendering. stdout: the rendering, UTF-8.
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(format):
    return datetime.now().strftime(format)


request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
messages = request["messages"]
if request.get("parse_arguments"):
    for message in messages:
        for call in message.get("tool_calls", []):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
kwargs = {}
if "enable_thinking" in request:
    kwargs["enable_thinking"] = request["enable_thinking"]
rendered = env.from_string(request["template"]).render(
    messages=messages, tools=request.get("tools"), documents=None,
    bos_token=request.get("bos_token", ""),
    add_generation_prompt=request["add_generation_prompt"], **kwargs)
sys.stdout.buffer.write(rendered.encode("utf-8"))
