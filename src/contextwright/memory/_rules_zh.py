"""The Chinese extraction rules: patterns, their builders, and how a sentence is read.

`ZH_RULES` is the table of (kind, pattern, builder) the rule extractor tries on each
clause, in order. The clause is kept nearly verbatim, "我" becoming "用户", so names,
numbers and measure words survive untouched. The rest is what the extractor needs to
read a Chinese sentence: the clause splitter, the lead-ins it strips, the question /
hypothetical / reported-speech guards, and the subject carried over from one clause
to the next (我35岁，在杭州工作 → 我在杭州工作).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ._extracted import _RANK, _Build, _Rule, _rules


def _zh_obj(text: str) -> str:
    # inside a statement "我" is the user talking about themself: 自己 reads naturally
    return re.sub(r"我(?!们)", "自己", text.replace("我的", "自己的"))


# Chinese: the clause is kept nearly verbatim, "我" becoming "用户" (as in
# "用户35岁，本科学历…"), so names, numbers and measure words survive untouched.
_ZADV = r"(?:也|还|都|很|非常|特别|比较|真的|一直|其实|确实|本来|现在|目前|已经|平时|一般|正|刚|刚刚|最近)*"
_ZNUM = r"(?:\d{1,3}|[一二三四五六七八九十两]{1,4})"
_ZREL = (
    "女儿|儿子|孩子们|孩子|小孩|宝宝|老婆|妻子|太太|爱人|老公|丈夫|先生|男朋友|女朋友|对象|父母|"
    "父亲|母亲|爸爸|妈妈|爸|妈|哥哥|姐姐|弟弟|妹妹|爷爷|奶奶|外公|外婆"
)
_ZREL_KEY = {
    "女儿": "daughter", "儿子": "son", "孩子们": "children", "孩子": "children", "小孩": "children",
    "宝宝": "children", "老婆": "spouse", "妻子": "spouse", "太太": "spouse", "爱人": "spouse",
    "老公": "spouse", "丈夫": "spouse", "先生": "spouse", "男朋友": "partner", "女朋友": "partner",
    "对象": "partner", "父母": "parents", "父亲": "father", "母亲": "mother", "爸爸": "father",
    "妈妈": "mother", "爸": "father", "妈": "mother", "哥哥": "elder_brother",
    "姐姐": "elder_sister", "弟弟": "younger_brother", "妹妹": "younger_sister",
    "爷爷": "grandfather", "奶奶": "grandmother", "外公": "grandfather", "外婆": "grandmother",
}  # fmt: skip
_TIME_ZH = (
    r"(?:下周[一二三四五六日天末]?|下个?星期[一二三四五六日天]?|下个月|下月|明年|明天|后天|今年|年底|月底|"
    r"这个?周末|周末|下半年|过几天|过段时间|以后|将来|近期|马上|很快)"
)
_LIFE_ZH = (
    r"(?:申请|去|买|学|换|搬|移民|考|报|办|读|找|开|创业|辞职|留学|定居|出国|转行|结婚|生|投资|卖|租|"
    r"旅行|旅游|回国|参加|入职|飞)"
)
_VAGUE_ZH = re.compile(r"^(?:你|这个|那个|它|这样|那样|这种|那种|这|那)")
_NOT_INTENT_ZH = re.compile(r"^(?:好|一下|你|问|知道|了解|请教|看看|确认|咨询|说)")
_JOB_ZH = re.compile(
    r"(?:员|师|医生|护士|律师|会计|老板|经理|总监|主管|司机|教授|记者|作家|销售|顾问|创始人|主播|博主|"
    r"模特|演员|店主|厨师|农民|军人|警察|白领|自由职业者?|公务员|全职妈妈|全职太太|学生|研究生|"
    r"博士生|本科生|工程师|设计师|程序员|架构师|科学家|画家|老师)$"
)


def _zh_whole(
    key: str | None = None, check: Callable[[re.Match[str]], bool] | None = None
) -> _Build:
    """The whole clause, "我" → "用户"."""

    def build(m: re.Match[str]) -> tuple[str, str | None] | None:
        if check is not None and not check(m):
            return None
        return "用户" + _zh_obj(m.string[1:]), key

    return build


def _age_zh(m: re.Match[str]) -> tuple[str, str | None] | None:
    n = m["n"]
    if n.isdigit() and not 1 <= int(n) <= 120:
        return None
    return f"用户{m.groupdict().get('t') or ''}{n}岁", "age"


def _family_zh(m: re.Match[str]) -> tuple[str, str | None] | None:
    rest = m["rest"]
    if re.match(r"^(?:说|觉得|认为|以为|问)", rest):
        return None  # reported speech: "我妈说我…" is the mother's opinion
    states = re.match(
        rf"^(?:今年|现在|已经|刚)?满?{_ZNUM}(?:周)?岁|^(?:叫|名叫|名字叫|的名字是|的名字叫)", rest
    )
    key = f"family.{_ZREL_KEY[m['rel']]}{_RANK.get(m['mod'] or '', '')}" if states else None
    return f"用户的{m['mod'] or ''}{m['rel']}{_zh_obj(rest)}", key


def _time_zh(m: re.Match[str]) -> tuple[str, str | None] | None:
    x = m["x"]
    if (not m["v"] and not re.match(_LIFE_ZH, x)) or _NOT_INTENT_ZH.match(x):
        return None
    return f"用户{m['t1'] or m['t2']}{m['v'] or ''}{_zh_obj(x)}", None


ZH_RULES: list[_Rule] = _rules(
    0,
    ("age", rf"^我(?P<t>今年|现在|目前|已经|已)?(?:已经|已)?满?(?P<n>{_ZNUM})周?岁(?!的时候|时|那年|以前|之前|以后|之后)", _age_zh),
    ("age", r"^我(?P<t>今年|现在)(?P<n>\d{1,3})了?$", _age_zh),
    ("age", rf"^我的年龄是(?P<n>{_ZNUM})周?岁?$", _age_zh),
    ("name", r"^我(?:的名字是|的名字叫|名叫|叫)(?P<x>[^\s你他她了车外]{1,4})$", _zh_whole("name")),
    ("health", rf"^我{_ZADV}对(?P<x>.+?)过敏", _zh_whole()),
    ("intent", rf"^我{_ZADV}对(?P<x>.+?)(?:很|非常|比较|特别|挺)?感兴趣", _zh_whole()),
    ("marital_status", r"^我(?:已经)?(?:结婚了|已婚|未婚|单身|离婚了|离异|订婚了|结婚\d+年)", _zh_whole("marital_status")),
    ("family", r"^我有(?:一个|一|两个|两|三个|三|\d+个|几个)[^，,]{0,8}?(?:女儿|儿子|孩子|小孩|宝宝)", _zh_whole("family.children")),
    ("family", rf"^我的?(?P<mod>大|小|二)?(?P<rel>{_ZREL})(?P<rest>.+)$", _family_zh),
    ("preference", rf"^我{_ZADV}(?:更喜欢|最喜欢|不太喜欢|不喜欢|喜欢|爱吃|爱喝|爱看|爱听|爱玩|热爱|偏好|偏爱|倾向于|讨厌|受不了|习惯)(?P<x>.+)$", _zh_whole(check=lambda m: not _VAGUE_ZH.match(m["x"]))),
    ("education", r"^我是?(?:本科|硕士|博士|研究生|大专|专科|高中|中专)(?:学历|毕业)", _zh_whole("education")),
    ("education", rf"^我{_ZADV}(?:本科|硕士|博士|研究生)?毕业于(?P<x>.+)$", _zh_whole("education")),
    ("education", r"^我(?:本科|硕士|博士|研究生)?是?在?[^，,]{2,15}?(?:大学|学院)(?:本科|硕士|博士|研究生)?毕业", _zh_whole("education")),
    ("education", rf"^我{_ZADV}在[^，,]{{2,15}}?(?:大学|学院|中学|高中)(?:读|上学|念|学习|留学)", _zh_whole("education")),
    ("intent", rf"^(?:(?P<t1>{_TIME_ZH})我|我(?P<t2>{_TIME_ZH}))(?P<v>就要|将要|要|会|将|准备|打算|计划|想|得|需要)?(?P<x>.+)$", _time_zh),
    ("intent", rf"^我{_ZADV}(?:正在|在)?考虑(?P<x>.+)$", _zh_whole()),
    ("employer", rf"^我{_ZADV}在(?P<x>[^，,]+?)(?:工作|上班|任职|就职|实习)", _zh_whole("employer", lambda m: not re.match(r"^(?:找|换|考虑|准备|想|忙|学|做|打算|犹豫|纠结|家里找)", m["x"]))),
    ("occupation", rf"^我{_ZADV}(?:是|当|做)(?:一名|一位)(?P<x>.{{1,15}})$", _zh_whole("occupation")),
    ("origin", r"^我是(?P<x>[^\d，,的个名位一]{2,6})人$", _zh_whole("origin")),
    ("occupation", rf"^我{_ZADV}是(?P<x>[^，,你他她]{{1,10}})$", _zh_whole("occupation", lambda m: bool(_JOB_ZH.search(m["x"])) and m["x"] not in ("新手", "小白"))),
    ("occupation", rf"^我{_ZADV}(?:从事|是做)(?P<x>.+?)(?:的|行业|工作)$", _zh_whole("occupation")),
    ("occupation", r"^我(?:已经)?退休了?$", _zh_whole("occupation")),
    ("location", rf"^我{_ZADV}(?:住在|生活在|定居在|定居于|居住在|常住在?|住)(?P<x>.+)$", _zh_whole("location", lambda m: len(m["x"]) >= 2 and not re.match(r"^(?:院|了|过|得|不|着|的|宿舍|一|几|酒店|宾馆|这|那)", m["x"]))),
    ("location", rf"^我{_ZADV}(?:搬到了|搬到|搬去了|搬去|搬家到|移居到?|迁居到?)(?P<x>.+)$", _zh_whole("location")),
    ("location", rf"^我{_ZADV}在(?P<x>[^，,]+?)(?:生活|定居|居住)", _zh_whole("location")),
    ("origin", rf"^我{_ZADV}在(?P<x>[^，,]+?)长大", _zh_whole("origin")),
    ("intent", rf"^我{_ZADV}(?:打算|计划|准备|决定|希望|将要|即将)(?P<x>.+)$", _zh_whole(check=lambda m: not _NOT_INTENT_ZH.match(m["x"]))),
    ("intent", rf"^我{_ZADV}(?:想要?|要)(?P<x>{_LIFE_ZH}.*)$", _zh_whole()),
)  # fmt: skip

_REMEMBER_ZH = re.compile(
    r"^(?:请|麻烦)?你?(?:帮我|要)?(?:记住|记一下|记下|记好|记得|别忘了|别忘记|不要忘了|不要忘记|千万别忘了)"
    r"了?[：:，,\s]*(?P<x>.+)$",
    re.S,
)

_ZH_SPLIT = re.compile(r"[，,；;]")
_ZH_LEAD = re.compile(
    r"^(?:(?:另外|还有就是|还有|而且|并且|但是|不过|可是|其实|顺便说一下|顺便|对了|嗯|哦|噢|好的|是的|"
    r"然后|所以|因为|说实话|实际上|老实说|补充一下|但)[，,：:\s]*)+"
)
_Q_ZH = re.compile(r"[吗呢么嘛][？?]?$|什么|怎么|为什么|为啥|哪|谁|多少|是否|是不是|能不能|可不可以|要不要|有没有|会不会|该不该|几岁|多大")  # fmt: skip
_HYPO_ZH = re.compile(
    r"如果|假如|假设|要是|万一|倘若|若是|假使|的话|设想|想象|希望我|但愿|如若|要不是|是否|不知道"
)
_REPORTED_ZH = re.compile(
    r"(?:他|她|他们|她们|别人|有人|朋友|同事|老板|你)(?:说|觉得|认为|以为|问)"
)
_SELF_ZH = re.compile(rf"^我(?!们)(?!的?(?:大|小|二)?(?:{_ZREL}))")
_SUBJECT_ZH = re.compile(r"^(?:我|你|他|她|它|咱|大家|别人|有人|这|那|[A-Za-z0-9\ue000])")


def _zh_statement(x: str) -> str:
    if x.startswith("我的"):
        return "用户的" + _zh_obj(x[2:])
    if x.startswith("我") and not x.startswith("我们"):
        return "用户" + _zh_obj(x[1:])
    return _zh_obj(x)
