import json

from celery.result import AsyncResult
from django.core.cache import cache
from django.http import HttpResponse, HttpResponseNotAllowed
from django.urls import path

from orders.models import Note
from orders.tasks import record


def reply(data, status=200):
    return HttpResponse(json.dumps(data), content_type="application/json", status=status)


def healthz(request):
    return HttpResponse("ok")


def send(request):
    """POST /tasks?text=…: queue a task on this world's broker."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    task = record.delay(request.GET.get("text", ""))
    cache.set("last-task", task.id)
    return reply({"task": task.id}, status=202)


def result(request, task_id):
    """GET /tasks/<id>: the task's state and result in this world's backend."""
    r = AsyncResult(task_id)
    return reply({"state": r.state, "result": r.result if r.successful() else None})


def notes(request):
    """GET /notes: what this world's worker wrote to this world's database."""
    return reply({
        "notes": list(Note.objects.order_by("id").values_list("text", flat=True)),
        "last_task": cache.get("last-task"),
    })


urlpatterns = [
    path("healthz", healthz),
    path("tasks", send),
    path("tasks/<str:task_id>", result),
    path("notes", notes),
]
