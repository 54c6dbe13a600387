"""Free text for generated requests: subjects, bodies, meeting and task names, new customers.

Written for this project (not taken from WorkBench's queries) so generated
train tasks cannot reproduce WorkBench test requests.
"""
from __future__ import annotations

MESSAGES = (
    ("Quarterly roadmap draft", "The first draft of the roadmap is in the shared folder. Comments welcome by Friday."),
    ("Lunch and learn next week", "We are hosting a lunch and learn on testing practices. Let me know if you can join."),
    ("Invoice question", "Could you confirm whether the October invoice has been paid?"),
    ("Office move", "Our team moves to the third floor on Monday. Please pack your desk by Friday."),
    ("Thanks for the demo", "Thanks for the demo today, the team was impressed."),
    ("Access request", "Please grant me read access to the analytics dashboard."),
    ("Holiday schedule", "Here is the holiday rota for December. Shout if anything looks wrong."),
    ("Design review notes", "Attached are my notes from the design review. The main open point is navigation."),
    ("Hiring update", "We have two strong candidates for the backend role and interviews are next week."),
    ("Budget sign-off", "The budget needs your sign-off before the end of the month."),
    ("Release checklist", "Please go through the release checklist and tick off your items."),
    ("Customer feedback summary", "I have summarised last month's customer feedback in a short document."),
    ("Server maintenance", "The staging server will be down on Saturday morning for maintenance."),
    ("Team offsite", "The offsite is confirmed for January. Travel details will follow."),
    ("Contract renewal", "The support contract is up for renewal. Can we discuss the terms?"),
    ("Welcome aboard", "Welcome to the team! Let me know if you need anything in your first week."),
    ("Sprint goals", "Here are the goals for the coming sprint. Please flag any concerns."),
    ("Training materials", "The onboarding training materials have been updated."),
    ("Security reminder", "Please rotate your passwords before the end of the week."),
    ("Meeting notes", "Sharing the notes from this morning's sync. Action items are at the bottom."),
    ("Vendor shortlist", "I narrowed the vendor list down to three. Happy to walk you through them."),
    ("Conference talk", "My talk proposal was accepted for the spring conference."),
    ("Expense report", "I submitted my expense report for the trip. Could you approve it?"),
    ("Mentoring sessions", "Would you be interested in monthly mentoring sessions next year?"),
)

REPLIES = (
    "Thanks, I will take a look this afternoon.",
    "Sounds good to me, go ahead.",
    "Can we push this to next week?",
    "Received, I will reply in detail tomorrow.",
    "Great news, thanks for letting me know.",
    "Please send me the latest version first.",
    "I agree with your proposal.",
    "Let's discuss this in our next one-to-one.",
    "Noted. I have added it to my list.",
    "Thank you, this is very helpful.",
    "Could you add more detail on the timeline?",
    "Approved.",
)

MEETING_NAMES = (
    "Roadmap planning", "Hiring sync", "Budget review", "Design critique", "Vendor call",
    "Release retrospective", "Security briefing", "Customer escalation review", "Onboarding check-in",
    "Architecture deep dive", "Marketing sync", "Quarterly business review", "Pricing workshop",
    "Data quality review", "Support rota planning", "Mentoring session", "Interview debrief",
    "Incident postmortem", "Product demo rehearsal", "Team health check",
)

TASK_NAMES = (
    "Migrate billing service to new API", "Write release notes for v2.4", "Redesign settings page",
    "Add rate limiting to public endpoints", "Audit accessibility of checkout", "Set up nightly backups",
    "Create icon set for mobile app", "Refactor notification worker", "Document onboarding flow",
    "Improve search result ranking", "Fix flaky integration tests", "Prototype dark mode",
    "Add CSV export to reports", "Clean up unused feature flags", "Update brand colour palette",
    "Speed up dashboard load time", "Add two-factor login", "Review error logging",
)

NEW_CUSTOMER_FIRST = ("Avery", "Blake", "Cameron", "Drew", "Elliot", "Finley", "Harper", "Jordan",
                      "Kendall", "Logan", "Morgan", "Parker", "Riley", "Rowan", "Sawyer", "Skyler")
NEW_CUSTOMER_LAST = ("Okafor", "Lindqvist", "Moreno", "Nakamura", "Fitzgerald", "Haddad", "Kowalski",
                     "Delacroix", "Brennan", "Castillo", "Ivanova", "Mbeki", "Sorensen", "Yilmaz")
NEW_CUSTOMER_COMPANIES = ("brightpath", "quantumleaf", "northwind", "bluepeak", "ironforge", "cloudnest")

NOTES = (
    "Asked for a follow-up demo.", "Interested in a volume discount.", "Wants a call after the holidays.",
    "Requested a case study.", "Evaluating two competitors.", "Budget approved for next quarter.",
)

CHITCHAT = (
    "Thanks, that's all for now!",
    "Good morning! How are you today?",
    "What day of the week is it today?",
    "What's today's date?",
    "Never mind, I'll handle it myself.",
    "Can you explain the difference between a bar chart and a line chart?",
    "What time do meetings have to finish by here?",
    "Great job earlier, thank you.",
    "Remind me, what does CRM stand for?",
    "Hmm, let me think about what I need and get back to you.",
    "Is 3pm a reasonable time for a team meeting in general?",
    "Ok, cancel that thought. I don't need anything.",
)

PERSONAL_DOMAINS = ("gmail.com", "yahoo.com", "outlook.com", "protonmail.com", "hotmail.com")
