"""A minimal stand-in for the `openai` Python package, which Debian does not package.

bloomery's CI installs llama.cpp's server test suite's dependencies from Debian, and the suite imports `openai` in
five of its files. The harness puts this folder on the path only when the real package is missing. It implements
just what those files call (`OpenAI(...).completions/chat.completions/responses/embeddings.create`, streamed and
not, and the SDK's error classes) over `requests`: every call is a real HTTP request to the server, and the test's
assertions run on the server's real answer, turned into objects whose fields read as the SDK's models read them
(a field the answer lacks reads as None, as the SDK's optional fields do; `Response.output_text` joins the output
text as the SDK's property does). It validates nothing the SDK would not, and invents no field.
"""
import json

import requests

__all__ = ["OpenAI", "APIError", "APIStatusError", "BadRequestError", "AuthenticationError", "NotFoundError"]


class APIError(Exception):
    def __init__(self, message, body=None):
        super().__init__(message)
        self.message = message
        self.body = body


class APIStatusError(APIError):
    def __init__(self, message, response, body):
        super().__init__(message, body)
        self.response = response
        self.status_code = response.status_code


class BadRequestError(APIStatusError):
    pass


class AuthenticationError(APIStatusError):
    pass


class PermissionDeniedError(APIStatusError):
    pass


class NotFoundError(APIStatusError):
    pass


class UnprocessableEntityError(APIStatusError):
    pass


class InternalServerError(APIStatusError):
    pass


_STATUS_ERRORS = {400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError,
                  422: UnprocessableEntityError}


class _Model:
    """A JSON object read through attributes; absent fields read as None."""

    def __init__(self, data):
        self.__dict__["_data"] = data

    def __getattr__(self, name):
        if name == "output_text" and self._data.get("object") == "response":
            return "".join(part.get("text", "") for item in self._data.get("output", []) if item.get("type") == "message"
                           for part in item.get("content", []) if part.get("type") == "output_text")
        return _wrap(self._data.get(name))

    def __getitem__(self, name):
        return _wrap(self._data[name])

    def __contains__(self, name):
        return name in self._data

    def model_dump(self):
        return self._data

    def __repr__(self):
        return f"_Model({json.dumps(self._data)})"


def _wrap(value):
    if isinstance(value, dict):
        return _Model(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


class _Endpoint:
    def __init__(self, client, path):
        self._client = client
        self._path = path

    def create(self, **params):
        body = {k: v for k, v in params.items() if v is not None}
        return self._client._post(self._path, body, stream=bool(body.get("stream")))


class _Chat:
    def __init__(self, client):
        self.completions = _Endpoint(client, "/chat/completions")


class OpenAI:
    def __init__(self, api_key=None, base_url=None, **_options):
        self.api_key = api_key
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        self.completions = _Endpoint(self, "/completions")
        self.chat = _Chat(self)
        self.responses = _Endpoint(self, "/responses")
        self.embeddings = _Endpoint(self, "/embeddings")

    def _post(self, path, body, stream):
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        response = requests.post(self.base_url + path, json=body, headers=headers, stream=stream, timeout=600)
        if response.status_code >= 400:
            try:
                error = response.json()
            except ValueError:
                error = response.text
            message = error.get("error", {}).get("message") if isinstance(error, dict) else error
            kind = _STATUS_ERRORS.get(response.status_code,
                                      InternalServerError if response.status_code >= 500 else APIStatusError)
            raise kind(f"Error code: {response.status_code} - {message}", response, error)
        if not stream:
            return _wrap(response.json())
        return _events(response)


def _events(response):
    """The server-sent events of a stream as SDK objects, to `data: [DONE]`; an error event raises, as the SDK does."""
    for line in response.iter_lines():
        text = line.decode("utf-8")
        if not text.startswith("data:"):
            continue
        data = text[5:].strip()
        if data == "[DONE]":
            break
        event = json.loads(data)
        if isinstance(event, dict) and "error" in event and event.get("type") != "error":
            raise APIError(str(event["error"].get("message", event["error"])), event)
        yield _wrap(event)
